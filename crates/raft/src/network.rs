//! Outgoing Raft traffic: one [`Transport`] per node (one gRPC channel per peer, shared by every
//! group), and a per-group [`GroupNetwork`] that stamps its group id on every message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, Entry, EntryPayload, LogId};
use rill_proto::internal::raft_transport_client::RaftTransportClient;
use rill_proto::internal::RaftMessage;
use tonic::transport::{Channel, Endpoint};

use crate::codec::Wire;
use crate::directory::LeaderDirectory;
use crate::heartbeat::Heartbeats;
use crate::liveness::Liveness;
use crate::types::{GroupId, NodeId, TypeConfig};

/// How long to wait for a TCP connection to a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long to back off after a peer was unreachable (or did not host the group yet). Short,
/// because a new partition's replicas start within milliseconds of each other.
const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(200);

/// Most command bytes one append-entries call carries (it always carries at least one entry).
///
/// openraft 0.9 gives every append-entries call one heartbeat interval (100 ms) to be answered,
/// and the follower answers only after its sync. Unbounded, a call carried up to
/// `max_entries_per_append` entries of up to a megabyte each: tens of megabytes that could not
/// be sent, written and synced in 100 ms on a busy disk, so every attempt timed out, was resent
/// whole, and the followers fell out of the ISR while the leader kept writing (seen as
/// `NOT_ENOUGH_REPLICAS` under a producer with 1 MiB batches). The network sends a prefix that
/// fits and reports it as a partial success, which openraft continues from.
#[cfg(not(madsim))]
pub const MAX_APPEND_BYTES: usize = 1 << 20;
/// In the simulation, whose records are a few bytes, a bound this low makes calls carry
/// prefixes, and new leaders probe their followers ([`wants_probe`]), under every fault.
#[cfg(madsim)]
pub const MAX_APPEND_BYTES: usize = 2 << 10;

/// How many of `entries`, from the first, fit in `max_bytes` of commands (at least one).
pub fn entries_within(entries: &[Entry<TypeConfig>], max_bytes: usize) -> usize {
    let mut bytes = 0usize;
    for (i, e) in entries.iter().enumerate() {
        bytes += match &e.payload {
            EntryPayload::Normal(p) => p.body.len(),
            _ => 0,
        };
        if bytes > max_bytes {
            return i.max(1);
        }
    }
    entries.len()
}

/// Whether to find out what the peer holds before sending `rpc`, whose first `fits` entries
/// fit in one call: when the request does not fit and does not continue from `acked_to` (the
/// last entry the peer acknowledged through this client).
///
/// A new leader does not know what its followers hold, and openraft 0.9 starts each follower's
/// replication with a binary search whose first request carries the entries from the *middle*
/// of the leader's log. Sent a megabyte per call (see [`MAX_APPEND_BYTES`]), a follower that
/// already had everything was sent the second half of the log again, entry by entry: after a
/// leadership change on a partition holding 1.2 GB, 600 MB to each follower before the leader
/// counted it in sync (4 s of `NOT_ENOUGH_REPLICAS` after a node's restart with 10 GB). Probes
/// ([`highest_held`]) ask the same question in a few small calls. Requests that continue where
/// the last acknowledged one ended — a follower catching up — are sent without probing.
fn wants_probe(rpc: &AppendEntriesRequest<TypeConfig>, fits: usize, acked_to: Option<LogId<NodeId>>) -> bool {
    fits < rpc.entries.len() && rpc.prev_log_id != acked_to
}

/// What a peer answered an append without entries whose previous entry is the one asked about.
#[derive(Debug)]
enum Probe {
    /// It holds that entry, flushed — and so, by Raft's log matching, every entry before it.
    Holds,
    /// It does not (its log is shorter, or holds another term's entry there).
    Lacks,
    /// Anything else (a higher vote): the answer to the whole request.
    Answer(AppendEntriesResponse<NodeId>),
}

/// What the probes found about a request's entries.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    /// The peer holds every entry of the request.
    All,
    /// The peer holds the request's entries up to this one (not the next).
    UpTo(LogId<NodeId>),
    /// The peer holds none of them (or the probes could not tell): send the request as asked.
    Unknown,
    /// A probe was answered otherwise: the answer to the request.
    Answer(AppendEntriesResponse<NodeId>),
}

/// The last of `entries` the peer holds, by binary search with `probe` (at most
/// ⌈log₂ n⌉ + 1 probes). Sound because a peer holding an entry holds all before it; a probe
/// that finds another term's entry makes the peer drop it and what follows, as the request
/// itself would.
async fn highest_held<E, F, Fut>(entries: &[LogId<NodeId>], mut probe: F) -> Result<Held, E>
where
    F: FnMut(LogId<NodeId>) -> Fut,
    Fut: std::future::Future<Output = Result<Probe, E>>,
{
    let Some(last) = entries.last() else { return Ok(Held::Unknown) };
    match probe(*last).await? {
        Probe::Holds => return Ok(Held::All),
        Probe::Answer(a) => return Ok(Held::Answer(a)),
        Probe::Lacks => {}
    }
    // Invariant: the peer lacks entries[hi]; it holds entries[lo - 1] when lo > 0.
    let (mut lo, mut hi) = (0usize, entries.len() - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match probe(entries[mid]).await? {
            Probe::Holds => lo = mid + 1,
            Probe::Lacks => hi = mid,
            Probe::Answer(a) => return Ok(Held::Answer(a)),
        }
    }
    Ok(match lo.checked_sub(1) {
        Some(i) => Held::UpTo(entries[i]),
        None => Held::Unknown,
    })
}

/// Why a call to a peer got no answer.
#[derive(Debug, Clone)]
pub enum PeerError {
    /// The peer is not reachable or does not host the group (yet): back off and retry.
    Unreachable(String),
    /// The call failed otherwise.
    Network(String),
}

impl PeerError {
    /// Classifies a failed gRPC call.
    pub(crate) fn from_status(status: &tonic::Status) -> Self {
        match status.code() {
            tonic::Code::NotFound | tonic::Code::Unavailable => Self::Unreachable(status.message().to_string()),
            _ => Self::Network(format!("{}: {}", status.code(), status.message())),
        }
    }

    fn into_rpc<E: std::error::Error>(self) -> RPCError<NodeId, BasicNode, E> {
        match self {
            Self::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&TransportError(e))),
            Self::Network(e) => network_error(e),
        }
    }
}

/// A transport failure, as an error type openraft can wrap.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// The node's connections to its peers. One lazily connected channel per peer address, over
/// mutual TLS when the node has certificates (the peer must present a certificate naming the
/// node it is dialed as; see `rill-tls`).
///
/// It also remembers when each peer last answered a Raft message of each group, so a leader
/// can tell a live follower from one that merely *was* caught up when it died, and when each
/// peer node was last heard from at all ([`Liveness`], for quiescent groups).
pub struct Transport {
    node_id: NodeId,
    liveness: Liveness,
    directory: LeaderDirectory,
    channels: Mutex<HashMap<(NodeId, String), Channel>>,
    contacts: Mutex<HashMap<(GroupId, NodeId), rill_rt::Instant>>,
    /// When each group's leader last reached this node (an append whose vote was accepted).
    leader_contacts: Mutex<HashMap<GroupId, rill_rt::Instant>>,
    heartbeats: Heartbeats,
    tls: Option<Arc<rill_tls::ReloadingTls>>,
}

impl Transport {
    /// The transport of node `node_id`, with no connections yet; `tls` secures every connection
    /// (`None`: plain TCP, the insecure setting). Each new connection, including a channel's
    /// reconnect, uses `tls`'s current certificate and CAs.
    pub fn new(node_id: NodeId, tls: Option<Arc<rill_tls::ReloadingTls>>) -> Arc<Self> {
        Arc::new(Self {
            node_id,
            liveness: Liveness::new(),
            directory: LeaderDirectory::new(),
            channels: Mutex::default(),
            contacts: Mutex::default(),
            leader_contacts: Mutex::default(),
            heartbeats: Heartbeats::default(),
            tls,
        })
    }

    /// The node this transport sends from.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// What this node knows of its peers' liveness.
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// Which node leads each group, as far as this node knows (see [`crate::directory`]).
    pub fn directory(&self) -> &LeaderDirectory {
        &self.directory
    }

    /// Every peer this node has a channel to (node, address).
    pub fn peers(&self) -> Vec<(NodeId, String)> {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.keys().filter(|(n, _)| *n != self.node_id).cloned().collect()
    }

    /// The channel to `node` at `addr` (`host:port`), created on first use.
    pub fn channel(&self, node: NodeId, addr: &str) -> Result<Channel, TransportError> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get(&(node, addr.to_string())) {
            return Ok(c.clone());
        }
        // `http` either way: with TLS the connector does the handshake and tonic speaks HTTP/2
        // over it (prior knowledge, as always for a tonic channel).
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| TransportError(format!("bad peer address {addr}: {e}")))?
            // With TLS this bounds the TCP connect and the handshake together.
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let channel = match &self.tls {
            None => endpoint.connect_lazy(),
            // The peer must present a certificate naming `node-<node>` (see `rill-tls`).
            #[cfg(not(madsim))]
            Some(tls) => {
                let settings = |e: rill_tls::TlsError| TransportError(format!("TLS settings for node {node}: {e}"));
                let connector = rill_tls::connector::NodeConnector::new(tls, node).map_err(settings)?;
                endpoint.connect_with_connector_lazy(connector)
            }
            #[cfg(madsim)]
            Some(_) => {
                return Err(TransportError("the simulation has no TLS: run it with the insecure setting".into()))
            }
        };
        channels.insert((node, addr.to_string()), channel.clone());
        Ok(channel)
    }

    /// When `node` last answered a Raft message of `group` sent from here.
    pub fn last_contact(&self, group: GroupId, node: NodeId) -> Option<rill_rt::Instant> {
        self.contacts.lock().unwrap_or_else(|p| p.into_inner()).get(&(group, node)).copied()
    }

    /// When the leader of `group` last reached this node, as its follower.
    pub fn last_leader_contact(&self, group: GroupId) -> Option<rill_rt::Instant> {
        self.leader_contacts.lock().unwrap_or_else(|p| p.into_inner()).get(&group).copied()
    }

    pub(crate) fn record_leader_contact(&self, group: GroupId) {
        self.record_leader_contact_at(group, rill_rt::now());
    }

    /// Records that the leader of `group` reached this node at `at`, unless a later contact is
    /// known.
    pub(crate) fn record_leader_contact_at(&self, group: GroupId, at: rill_rt::Instant) {
        keep_latest(&self.leader_contacts, group, at);
    }

    pub(crate) fn heartbeats(&self) -> &Heartbeats {
        &self.heartbeats
    }

    fn record_contact(&self, group: GroupId, node: NodeId) {
        self.record_contact_at(group, node, rill_rt::now());
    }

    /// Records that `node` answered `group` at `at`, unless a later answer is known.
    pub(crate) fn record_contact_at(&self, group: GroupId, node: NodeId, at: rill_rt::Instant) {
        keep_latest(&self.contacts, (group, node), at);
    }

    pub(crate) fn client(&self, node: NodeId, addr: &str) -> Result<RaftTransportClient<Channel>, TransportError> {
        Ok(RaftTransportClient::new(self.channel(node, addr)?)
            .max_decoding_message_size(rill_proto::MAX_GRPC_MESSAGE_BYTES)
            .max_encoding_message_size(rill_proto::MAX_GRPC_MESSAGE_BYTES))
    }
}

/// Creates [`GroupNetwork`]s for one group.
pub struct GroupNetworkFactory {
    group: GroupId,
    transport: Arc<Transport>,
}

impl GroupNetworkFactory {
    /// A factory for `group` over `transport`.
    pub fn new(group: GroupId, transport: Arc<Transport>) -> Self {
        Self { group, transport }
    }
}

impl RaftNetworkFactory<TypeConfig> for GroupNetworkFactory {
    type Network = GroupNetwork;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        GroupNetwork {
            group: self.group,
            target,
            addr: node.addr.clone(),
            transport: self.transport.clone(),
            commit_sent: None,
            acked_to: None,
        }
    }
}

/// One group's view of one peer.
pub struct GroupNetwork {
    group: GroupId,
    target: NodeId,
    addr: String,
    transport: Arc<Transport>,
    /// The highest commit index announced to this peer: sent in an append it acknowledged, or
    /// in an announcement attempted (see `append_entries`).
    commit_sent: Option<LogId<NodeId>>,
    /// The last entry this peer acknowledged having through this client (see [`wants_probe`]).
    acked_to: Option<LogId<NodeId>>,
}

#[derive(Clone, Copy)]
enum Rpc {
    Append,
    Vote,
    Snapshot,
}

impl GroupNetwork {
    async fn call<Req, Resp, E>(
        &self,
        rpc: Rpc,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
    where
        Req: Wire,
        Result<Resp, E>: Wire,
        E: std::error::Error,
    {
        let payload = req.encode();
        let mut client =
            self.transport.client(self.target, &self.addr).map_err(|e| PeerError::Unreachable(e.0).into_rpc())?;
        let msg = RaftMessage { group_id: self.group, payload, error: String::new() };
        let call = async {
            match rpc {
                Rpc::Append => client.append_entries(msg).await,
                Rpc::Vote => client.vote(msg).await,
                Rpc::Snapshot => client.install_snapshot(msg).await,
            }
        };
        let reply = match rill_rt::timeout(option.hard_ttl(), call).await {
            Err(_) => {
                return Err(network_error(format!(
                    "no answer from node {} within {:?}",
                    self.target,
                    option.hard_ttl()
                )))
            }
            Ok(Err(status)) => return Err(PeerError::from_status(&status).into_rpc()),
            Ok(Ok(r)) => r.into_inner(),
        };
        self.answer(reply.payload)
    }

    /// A heartbeat: coalesced with the other groups' heartbeats to the same peer.
    async fn heartbeat(
        &self,
        req: &AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let sent = self.transport.heartbeat(self.target, &self.addr, self.group, req.encode());
        match rill_rt::timeout(option.hard_ttl(), sent).await {
            Err(_) => Err(network_error(format!("no answer from node {} within {:?}", self.target, option.hard_ttl()))),
            Ok(Err(e)) => Err(e.into_rpc()),
            Ok(Ok(reply)) => self.answer(reply.payload),
        }
    }

    /// Sends `rpc` (entries and all), or, when only its first `fits` entries fit in one call,
    /// that prefix, answered as a partial success openraft continues from.
    async fn send(
        &self,
        rpc: &mut AppendEntriesRequest<TypeConfig>,
        fits: usize,
        option: &RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        if fits == rpc.entries.len() {
            return self.call(Rpc::Append, &*rpc, option).await;
        }
        rpc.entries.truncate(fits);
        let last = rpc.entries.last().map(|e| e.log_id);
        Ok(match self.call(Rpc::Append, &*rpc, option).await? {
            AppendEntriesResponse::Success => AppendEntriesResponse::PartialSuccess(last),
            other => other,
        })
    }

    /// Records what the peer acknowledged of `rpc` (sent, or probed): the last entry it holds
    /// and the commit index it was told.
    fn acknowledged(&mut self, rpc: &AppendEntriesRequest<TypeConfig>, answer: &AppendEntriesResponse<NodeId>) {
        let held = match answer {
            AppendEntriesResponse::Success => rpc.entries.last().map(|e| e.log_id),
            AppendEntriesResponse::PartialSuccess(last) => *last,
            _ => return,
        };
        self.acked_to = held;
        self.commit_sent = self.commit_sent.max(rpc.leader_commit);
    }

    /// Asks the peer whether it holds entry `at` (see [`Probe`]): an append of `rpc`'s leader
    /// without entries whose previous entry is `at`.
    async fn probe(
        &self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        at: LogId<NodeId>,
        option: &RPCOption,
    ) -> Result<Probe, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let probe = AppendEntriesRequest {
            vote: rpc.vote,
            prev_log_id: Some(at),
            entries: Vec::new(),
            leader_commit: rpc.leader_commit,
        };
        Ok(match self.call(Rpc::Append, &probe, option).await? {
            AppendEntriesResponse::Success => Probe::Holds,
            AppendEntriesResponse::Conflict => Probe::Lacks,
            other => Probe::Answer(other),
        })
    }

    /// Decodes the peer's answer and records the contact.
    fn answer<Resp, E>(&self, payload: bytes::Bytes) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
    where
        Result<Resp, E>: Wire,
        E: std::error::Error,
    {
        // An undecodable answer, or a failure the remote raft reported, is a network error:
        // openraft backs off and tries again.
        let answer = <Result<Resp, E>>::decode(payload).map_err(network_error)?;
        self.transport.record_contact(self.group, self.target);
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

/// Sets `key`'s time in `times` to `at`, unless it holds a later one (answers may be recorded
/// out of order).
fn keep_latest<K: std::hash::Hash + Eq>(times: &Mutex<HashMap<K, rill_rt::Instant>>, key: K, at: rill_rt::Instant) {
    let mut times = times.lock().unwrap_or_else(|p| p.into_inner());
    let slot = times.entry(key).or_insert(at);
    *slot = (*slot).max(at);
}

fn network_error<E: std::error::Error>(e: String) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&TransportError(e)))
}

impl RaftNetwork<TypeConfig> for GroupNetwork {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        if rpc.entries.is_empty() {
            // An empty append that carries a newer commit index is the leader telling the
            // follower what was just committed, and the group's replication to this peer waits
            // for its answer: the next write's entries go out only after it. Queued with the
            // heartbeats it would hold that write up by the heartbeat linger, so it goes at once.
            // One that carries nothing new is a heartbeat, and is coalesced.
            if rpc.leader_commit > self.commit_sent {
                // Counted as announced even if it fails: the heartbeats that follow carry the
                // same commit index, and retrying the announcement directly every time would
                // undo the coalescing for a peer that does not answer.
                self.commit_sent = rpc.leader_commit;
                return self.call(Rpc::Append, &rpc, &option).await;
            }
            return self.heartbeat(&rpc, &option).await;
        }
        let fits = entries_within(&rpc.entries, MAX_APPEND_BYTES);
        if wants_probe(&rpc, fits, self.acked_to) {
            let ids: Vec<LogId<NodeId>> = rpc.entries.iter().map(|e| e.log_id).collect();
            let held = if rill_rt::mutation::active(rill_rt::mutation::Mutation::ProbeClaimsAll) {
                Held::All
            } else {
                highest_held(&ids, |at| self.probe(&rpc, at, &option)).await?
            };
            let answer = match held {
                Held::All => AppendEntriesResponse::Success,
                Held::UpTo(id) => AppendEntriesResponse::PartialSuccess(Some(id)),
                Held::Answer(a) => return Ok(a),
                // It holds none of them: send from `prev` as asked.
                Held::Unknown => self.send(&mut rpc, fits, &option).await?,
            };
            self.acknowledged(&rpc, &answer);
            return Ok(answer);
        }
        let answer = self.send(&mut rpc, fits, &option).await?;
        self.acknowledged(&rpc, &answer);
        Ok(answer)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        self.call(Rpc::Snapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::Vote, &rpc, &option).await
    }

    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId};

    use super::*;
    use crate::types::test_entries::normal as entry;

    #[test]
    fn append_calls_carry_a_bounded_prefix_but_at_least_one_entry() {
        let small: Vec<_> = (1..=10).map(|i| entry(i, 100)).collect();
        assert_eq!(entries_within(&small, 1000), 10, "exactly at the limit fits");
        assert_eq!(entries_within(&small, 999), 9);
        let big: Vec<_> = (1..=3).map(|i| entry(i, 5000)).collect();
        assert_eq!(entries_within(&big, 1000), 1, "one oversized entry still goes");
        assert_eq!(entries_within(&big, 10_000), 2);
        let blank =
            Entry::<TypeConfig> { log_id: LogId::new(CommittedLeaderId::new(1, 1), 1), payload: EntryPayload::Blank };
        assert_eq!(entries_within(&[blank], 0), 1);
        assert_eq!(entries_within(&[], 10), 0);
    }

    fn request(prev: Option<u64>, entries: std::ops::RangeInclusive<u64>) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: openraft::Vote::new_committed(1, 1),
            prev_log_id: prev.map(|i| LogId::new(CommittedLeaderId::new(1, 1), i)),
            entries: entries.map(|i| entry(i, 1000)).collect(),
            leader_commit: None,
        }
    }

    fn id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    #[test]
    fn only_a_request_that_does_not_fit_and_jumps_is_probed() {
        // A new leader's first request (nothing acknowledged yet) from the middle of its log.
        let jump = request(Some(50), 51..=60);
        assert!(wants_probe(&jump, 1, None));
        // A binary search step past what was acknowledged.
        assert!(wants_probe(&jump, 1, Some(id(1, 20))));
        // Catching up: the request continues where the last acknowledged one ended.
        assert!(!wants_probe(&jump, 1, Some(id(1, 50))));
        // A request sent whole in one call is never probed.
        assert!(!wants_probe(&jump, 10, None));
        assert!(wants_probe(&request(None, 1..=5), 2, Some(id(1, 3))));
        assert!(!wants_probe(&request(None, 1..=5), 2, None), "continues from nothing acknowledged");
    }

    /// Probes against a follower holding `log` (its entries' ids, in order), counting calls.
    fn held(request: &[LogId<NodeId>], log: &[LogId<NodeId>]) -> (Held, usize) {
        let calls = std::cell::Cell::new(0);
        let probe = |at: LogId<NodeId>| {
            calls.set(calls.get() + 1);
            let holds = log.contains(&at);
            async move { Ok::<_, ()>(if holds { Probe::Holds } else { Probe::Lacks }) }
        };
        let found = futures::executor::block_on(highest_held(request, probe)).unwrap_or(Held::Unknown);
        (found, calls.get())
    }

    #[test]
    fn probes_find_the_last_entry_a_follower_holds() {
        // The leader's log: term 2 up to index 100, then its own blank entry of term 3.
        let leader: Vec<_> = (1..=100).map(|i| id(2, i)).chain([id(3, 101)]).collect();
        // Requests entries 41..=101. A follower with everything: one probe.
        let request = &leader[40..];
        assert_eq!(held(request, &leader), (Held::All, 1));
        // A follower with everything but the new leader's entry (a handover).
        let (found, calls) = held(request, &leader[..100]);
        assert_eq!(found, Held::UpTo(id(2, 100)));
        assert!(calls <= 8, "{calls} probes for 61 entries");
        // A follower that stopped at 70.
        assert_eq!(held(request, &leader[..70]).0, Held::UpTo(id(2, 70)));
        // A follower with none of them, or another term's entries from 41 on.
        assert_eq!(held(request, &leader[..30]).0, Held::Unknown);
        let diverged: Vec<_> = (1..=40).map(|i| id(2, i)).chain((41..=90).map(|i| id(1, i))).collect();
        assert_eq!(held(request, &diverged).0, Held::Unknown);
        // Holding exactly the request's first entry.
        assert_eq!(held(request, &leader[..41]).0, Held::UpTo(id(2, 41)));
        // A higher vote ends the search with that answer.
        let higher = || AppendEntriesResponse::HigherVote(openraft::Vote::new(5, 2));
        let vote = |_| async move { Ok::<_, ()>(Probe::Answer(higher())) };
        let found = futures::executor::block_on(highest_held(request, vote));
        assert_eq!(found, Ok(Held::Answer(higher())));
    }
}

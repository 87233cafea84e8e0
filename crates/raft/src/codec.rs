//! Encodings of everything Raft stores or sends: the prost messages of `proto/rill/raft.proto`,
//! versioned by their field numbers (a field can be added and older data and older nodes still
//! read), never serde of Rust structs.
//!
//! * Stored entries: `version (2) ‖ base position ‖ units ‖ header length ‖ EntryHeader ‖ body`.
//!   The body (the state machine command — for a partition, its record batches) is stored raw
//!   after the header, so reading an entry back hands out a slice of the stored bytes without
//!   copying or re-decoding it.
//! * Votes, log ids, the purge point and snapshots: [`Wire`] (prost, one message each).
//! * Messages between nodes: requests and answers of append-entries, vote and install-snapshot
//!   are [`Wire`] too. An answer that is an error the remote Raft raised (it stopped, or failed)
//!   decodes as `Err(reason)`, which the network reports as a network error; a snapshot stream
//!   the follower did not expect decodes as openraft's `SnapshotMismatch`, so the leader restarts it.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use openraft::error::{InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, SnapshotSegmentId};
use prost::Message;
use rill_proto::raft as pb;

use crate::types::{Entry, LogId, Membership, NodeId, Payload, SnapshotMeta, StoredMembership, TypeConfig, Vote};

/// Version 2: the entry header is a prost `EntryHeader` (version 1 was bincode, not read).
const ENTRY_FORMAT: u8 = 2;
const FIXED_HEADER_LEN: usize = 1 + 8 + 4 + 4;

/// A value with a versioned wire and storage form.
pub trait Wire: Sized {
    /// Its encoding.
    fn encode(&self) -> Bytes;
    /// Decodes what [`Wire::encode`] wrote (by this or an earlier or later release).
    fn decode(bytes: Bytes) -> Result<Self, String>;
}

fn decode_pb<M: Message + Default>(bytes: Bytes, what: &str) -> Result<M, String> {
    M::decode(bytes).map_err(|e| format!("undecodable {what}: {e}"))
}

fn need<T>(v: Option<T>, what: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("{what} is missing"))
}

// ------------------------------------------------------------------ plain types -----------

fn log_id_to(id: &LogId) -> pb::LogId {
    pb::LogId { term: id.leader_id.term, node_id: id.leader_id.node_id, index: id.index }
}

fn log_id_from(p: pb::LogId) -> LogId {
    LogId::new(CommittedLeaderId::new(p.term, p.node_id), p.index)
}

fn vote_to(v: &Vote) -> pb::Vote {
    pb::Vote { term: v.leader_id.term, node_id: v.leader_id.node_id, committed: v.committed }
}

fn vote_from(p: pb::Vote) -> Vote {
    if p.committed {
        Vote::new_committed(p.term, p.node_id)
    } else {
        Vote::new(p.term, p.node_id)
    }
}

fn membership_to(m: &Membership) -> pb::Membership {
    pb::Membership {
        configs: m.get_joint_config().iter().map(|c| pb::NodeSet { ids: c.iter().copied().collect() }).collect(),
        nodes: m.nodes().map(|(id, n)| (*id, n.addr.clone())).collect(),
    }
}

fn membership_from(p: pb::Membership) -> Membership {
    let configs: Vec<BTreeSet<NodeId>> = p.configs.into_iter().map(|c| c.ids.into_iter().collect()).collect();
    let nodes: BTreeMap<NodeId, BasicNode> = p.nodes.into_iter().map(|(id, addr)| (id, BasicNode::new(addr))).collect();
    Membership::new(configs, nodes)
}

fn stored_membership_to(m: &StoredMembership) -> pb::StoredMembership {
    pb::StoredMembership { log_id: m.log_id().as_ref().map(log_id_to), membership: Some(membership_to(m.membership())) }
}

fn stored_membership_from(p: pb::StoredMembership) -> StoredMembership {
    StoredMembership::new(p.log_id.map(log_id_from), p.membership.map(membership_from).unwrap_or_default())
}

/// A snapshot's metadata, as prost.
pub(crate) fn snapshot_meta_to(m: &SnapshotMeta) -> pb::SnapshotMeta {
    pb::SnapshotMeta {
        last_log_id: m.last_log_id.as_ref().map(log_id_to),
        last_membership: Some(stored_membership_to(&m.last_membership)),
        snapshot_id: m.snapshot_id.clone(),
    }
}

/// A snapshot's metadata, from prost.
pub(crate) fn snapshot_meta_from(p: pb::SnapshotMeta) -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: p.last_log_id.map(log_id_from),
        last_membership: p.last_membership.map(stored_membership_from).unwrap_or_default(),
        snapshot_id: p.snapshot_id,
    }
}

/// The adapter's applied state, as prost.
pub(crate) fn applied_to(a: &crate::state_machine::Applied) -> pb::Applied {
    pb::Applied {
        log_id: a.log_id.as_ref().map(log_id_to),
        membership: Some(stored_membership_to(&a.membership)),
        position: a.position,
    }
}

/// The adapter's applied state, from prost.
pub(crate) fn applied_from(p: pb::Applied) -> crate::state_machine::Applied {
    crate::state_machine::Applied {
        log_id: p.log_id.map(log_id_from),
        membership: p.membership.map(stored_membership_from).unwrap_or_default(),
        position: p.position,
    }
}

impl Wire for Vote {
    fn encode(&self) -> Bytes {
        vote_to(self).encode_to_vec().into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        decode_pb(bytes, "vote").map(vote_from)
    }
}

impl Wire for LogId {
    fn encode(&self) -> Bytes {
        log_id_to(self).encode_to_vec().into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        decode_pb(bytes, "log id").map(log_id_from)
    }
}

/// The purge point: the last purged log id and the first position still stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    /// Last purged log id.
    pub log_id: LogId,
    /// First position still stored.
    pub start_position: u64,
    /// The first log index kept whatever Raft purges (see `LogStore::retain_from`).
    pub retained_from: Option<u64>,
}

impl Wire for Purged {
    fn encode(&self) -> Bytes {
        pb::Purged {
            log_id: Some(log_id_to(&self.log_id)),
            start_position: self.start_position,
            retained_from: self.retained_from,
        }
        .encode_to_vec()
        .into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        let p: pb::Purged = decode_pb(bytes, "purge point")?;
        Ok(Self {
            log_id: log_id_from(need(p.log_id, "purged log id")?),
            start_position: p.start_position,
            retained_from: p.retained_from,
        })
    }
}

/// An installation in progress (RaftMeta `i`, see `LogStore::install`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstallMarker {
    /// The snapshot's last log id: the log is purged up to it once installed.
    pub last: LogId,
    /// Position after the snapshot's last entry.
    pub end_position: u64,
    /// The carried entries, staged: the first index and how many (one per index).
    pub first_index: Option<u64>,
    /// How many entries were carried.
    pub entry_count: u64,
    /// The first position stored once installed.
    pub start_position: u64,
}

impl Wire for InstallMarker {
    fn encode(&self) -> Bytes {
        pb::InstallMarker {
            last: Some(log_id_to(&self.last)),
            end_position: self.end_position,
            first_index: self.first_index,
            entry_count: self.entry_count,
            start_position: self.start_position,
        }
        .encode_to_vec()
        .into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        let p: pb::InstallMarker = decode_pb(bytes, "install marker")?;
        Ok(Self {
            last: log_id_from(need(p.last, "installed log id")?),
            end_position: p.end_position,
            first_index: p.first_index,
            entry_count: p.entry_count,
            start_position: p.start_position,
        })
    }
}

// ------------------------------------------------------------------ entries ---------------

/// An entry as stored, with the position it starts at.
#[derive(Debug, Clone)]
pub struct StoredEntry {
    /// First position the entry occupies (positions are dense across the group's log).
    pub base: u64,
    /// The entry.
    pub entry: Entry,
}

impl StoredEntry {
    /// Positions the entry occupies (0 for blank and membership entries).
    pub fn units(&self) -> u32 {
        match &self.entry.payload {
            EntryPayload::Normal(p) => p.units,
            _ => 0,
        }
    }

    /// The position after this entry.
    pub fn end(&self) -> u64 {
        self.base + u64::from(self.units())
    }
}

/// Encodes `entry` starting at position `base`.
pub fn encode_entry(base: u64, entry: &Entry) -> Result<Bytes, String> {
    let blank = || pb::entry_header::Payload::Blank(pb::Blank {});
    let (payload, units, body) = match &entry.payload {
        EntryPayload::Blank => (blank(), 0, Bytes::new()),
        EntryPayload::Normal(p) => (pb::entry_header::Payload::Normal(pb::Blank {}), p.units, p.body.clone()),
        EntryPayload::Membership(m) => (pb::entry_header::Payload::Membership(membership_to(m)), 0, Bytes::new()),
    };
    let header = pb::EntryHeader { log_id: Some(log_id_to(&entry.log_id)), payload: Some(payload) }.encode_to_vec();
    let header_len = u32::try_from(header.len()).map_err(|_| "entry header too large".to_string())?;
    let mut out = BytesMut::with_capacity(FIXED_HEADER_LEN + header.len() + body.len());
    out.put_u8(ENTRY_FORMAT);
    out.put_u64_le(base);
    out.put_u32_le(units);
    out.put_u32_le(header_len);
    out.put_slice(&header);
    out.put_slice(&body);
    Ok(out.freeze())
}

/// Decodes a stored entry. The body is a zero-copy slice of `bytes`.
pub fn decode_entry(mut bytes: Bytes) -> Result<StoredEntry, String> {
    if bytes.len() < FIXED_HEADER_LEN {
        return Err(format!("entry of {} bytes is shorter than its fixed header", bytes.len()));
    }
    let version = bytes.get_u8();
    if version != ENTRY_FORMAT {
        return Err(format!("unknown entry format version {version} (this release reads version {ENTRY_FORMAT})"));
    }
    let base = bytes.get_u64_le();
    let units = bytes.get_u32_le();
    let header_len = bytes.get_u32_le() as usize;
    if bytes.len() < header_len {
        return Err("entry header runs past the end".into());
    }
    let header: pb::EntryHeader = decode_pb(bytes.split_to(header_len), "entry header")?;
    let log_id = log_id_from(need(header.log_id, "entry log id")?);
    let payload = match need(header.payload, "entry payload")? {
        pb::entry_header::Payload::Blank(_) => EntryPayload::Blank,
        pb::entry_header::Payload::Normal(_) => EntryPayload::Normal(Payload { units, body: bytes, proposal: 0 }),
        pb::entry_header::Payload::Membership(m) => EntryPayload::Membership(membership_from(m)),
    };
    Ok(StoredEntry { base, entry: Entry { log_id, payload } })
}

fn entry_to(e: &Entry) -> pb::Entry {
    let payload = match &e.payload {
        EntryPayload::Blank => pb::entry::Payload::Blank(pb::Blank {}),
        EntryPayload::Normal(p) => pb::entry::Payload::Normal(pb::Normal { units: p.units, body: p.body.clone() }),
        EntryPayload::Membership(m) => pb::entry::Payload::Membership(membership_to(m)),
    };
    pb::Entry { log_id: Some(log_id_to(&e.log_id)), payload: Some(payload) }
}

fn entry_from(p: pb::Entry) -> Result<Entry, String> {
    let log_id = log_id_from(need(p.log_id, "entry log id")?);
    let payload = match need(p.payload, "entry payload")? {
        pb::entry::Payload::Blank(_) => EntryPayload::Blank,
        pb::entry::Payload::Normal(n) => EntryPayload::Normal(Payload { units: n.units, body: n.body, proposal: 0 }),
        pb::entry::Payload::Membership(m) => EntryPayload::Membership(membership_from(m)),
    };
    Ok(Entry { log_id, payload })
}

// ------------------------------------------------------------------ messages --------------

fn failure(message: String) -> pb::RemoteFailure {
    pb::RemoteFailure { message }
}

impl Wire for AppendEntriesRequest<TypeConfig> {
    fn encode(&self) -> Bytes {
        pb::AppendEntriesRequest {
            vote: Some(vote_to(&self.vote)),
            prev_log_id: self.prev_log_id.as_ref().map(log_id_to),
            leader_commit: self.leader_commit.as_ref().map(log_id_to),
            entries: self.entries.iter().map(entry_to).collect(),
        }
        .encode_to_vec()
        .into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        let p: pb::AppendEntriesRequest = decode_pb(bytes, "append-entries request")?;
        Ok(Self {
            vote: vote_from(need(p.vote, "vote")?),
            prev_log_id: p.prev_log_id.map(log_id_from),
            leader_commit: p.leader_commit.map(log_id_from),
            entries: p.entries.into_iter().map(entry_from).collect::<Result<_, _>>()?,
        })
    }
}

impl Wire for Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
    fn encode(&self) -> Bytes {
        use pb::append_entries_response::Result as R;
        let result = match self {
            Ok(AppendEntriesResponse::Success) => R::Success(pb::Blank {}),
            Ok(AppendEntriesResponse::PartialSuccess(last)) => {
                R::PartialSuccess(pb::PartialSuccess { last: last.as_ref().map(log_id_to) })
            }
            Ok(AppendEntriesResponse::Conflict) => R::Conflict(pb::Blank {}),
            Ok(AppendEntriesResponse::HigherVote(v)) => R::HigherVote(vote_to(v)),
            Err(e) => R::Failure(failure(e.to_string())),
        };
        pb::AppendEntriesResponse { result: Some(result) }.encode_to_vec().into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        use pb::append_entries_response::Result as R;
        let p: pb::AppendEntriesResponse = decode_pb(bytes, "append-entries answer")?;
        Ok(Ok(match need(p.result, "append-entries result")? {
            R::Success(_) => AppendEntriesResponse::Success,
            R::PartialSuccess(s) => AppendEntriesResponse::PartialSuccess(s.last.map(log_id_from)),
            R::Conflict(_) => AppendEntriesResponse::Conflict,
            R::HigherVote(v) => AppendEntriesResponse::HigherVote(vote_from(v)),
            R::Failure(f) => return Err(format!("the remote raft failed: {}", f.message)),
        }))
    }
}

impl Wire for VoteRequest<NodeId> {
    fn encode(&self) -> Bytes {
        pb::VoteRequest { vote: Some(vote_to(&self.vote)), last_log_id: self.last_log_id.as_ref().map(log_id_to) }
            .encode_to_vec()
            .into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        let p: pb::VoteRequest = decode_pb(bytes, "vote request")?;
        Ok(Self { vote: vote_from(need(p.vote, "vote")?), last_log_id: p.last_log_id.map(log_id_from) })
    }
}

impl Wire for Result<VoteResponse<NodeId>, RaftError<NodeId>> {
    fn encode(&self) -> Bytes {
        use pb::vote_response::Result as R;
        let result = match self {
            Ok(v) => R::Answer(pb::VoteGranted {
                vote: Some(vote_to(&v.vote)),
                vote_granted: v.vote_granted,
                last_log_id: v.last_log_id.as_ref().map(log_id_to),
            }),
            Err(e) => R::Failure(failure(e.to_string())),
        };
        pb::VoteResponse { result: Some(result) }.encode_to_vec().into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        use pb::vote_response::Result as R;
        let p: pb::VoteResponse = decode_pb(bytes, "vote answer")?;
        match need(p.result, "vote result")? {
            R::Answer(a) => Ok(Ok(VoteResponse {
                vote: vote_from(need(a.vote, "vote")?),
                vote_granted: a.vote_granted,
                last_log_id: a.last_log_id.map(log_id_from),
            })),
            R::Failure(f) => Err(format!("the remote raft failed: {}", f.message)),
        }
    }
}

impl Wire for InstallSnapshotRequest<TypeConfig> {
    fn encode(&self) -> Bytes {
        pb::InstallSnapshotRequest {
            vote: Some(vote_to(&self.vote)),
            meta: Some(snapshot_meta_to(&self.meta)),
            offset: self.offset,
            data: Bytes::copy_from_slice(&self.data),
            done: self.done,
        }
        .encode_to_vec()
        .into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        let p: pb::InstallSnapshotRequest = decode_pb(bytes, "install-snapshot request")?;
        Ok(Self {
            vote: vote_from(need(p.vote, "vote")?),
            meta: snapshot_meta_from(need(p.meta, "snapshot meta")?),
            offset: p.offset,
            data: p.data.to_vec(),
            done: p.done,
        })
    }
}

fn segment_to(s: &SnapshotSegmentId) -> pb::SnapshotSegmentId {
    pb::SnapshotSegmentId { id: s.id.clone(), offset: s.offset }
}

fn segment_from(p: Option<pb::SnapshotSegmentId>) -> SnapshotSegmentId {
    let p = p.unwrap_or_default();
    SnapshotSegmentId { id: p.id, offset: p.offset }
}

impl Wire for Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
    fn encode(&self) -> Bytes {
        use pb::install_snapshot_response::Result as R;
        let result = match self {
            Ok(r) => R::Vote(vote_to(&r.vote)),
            Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(m))) => {
                R::Mismatch(pb::SnapshotMismatch { expect: Some(segment_to(&m.expect)), got: Some(segment_to(&m.got)) })
            }
            Err(e) => R::Failure(failure(e.to_string())),
        };
        pb::InstallSnapshotResponse { result: Some(result) }.encode_to_vec().into()
    }
    fn decode(bytes: Bytes) -> Result<Self, String> {
        use pb::install_snapshot_response::Result as R;
        let p: pb::InstallSnapshotResponse = decode_pb(bytes, "install-snapshot answer")?;
        match need(p.result, "install-snapshot result")? {
            R::Vote(v) => Ok(Ok(InstallSnapshotResponse { vote: vote_from(v) })),
            R::Mismatch(m) => Ok(Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect: segment_from(m.expect),
                got: segment_from(m.got),
            })))),
            R::Failure(f) => Err(format!("the remote raft failed: {}", f.message)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::error::Fatal;
    use openraft::{BasicNode, CommittedLeaderId};

    use super::*;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn three() -> Membership {
        let members: BTreeSet<u64> = [1, 2, 3].into();
        let nodes = members.iter().map(|id| (*id, BasicNode::new(format!("n{id}")))).collect::<BTreeMap<_, _>>();
        Membership::new(vec![members], nodes)
    }

    #[test]
    fn round_trips_every_entry_kind() {
        let normal = Entry {
            log_id: log_id(3, 9),
            payload: EntryPayload::Normal(Payload { units: 5, body: Bytes::from_static(b"records"), proposal: 77 }),
        };
        let decoded = decode_entry(encode_entry(40, &normal).unwrap()).unwrap();
        assert_eq!(decoded.base, 40);
        assert_eq!(decoded.end(), 45);
        assert_eq!(decoded.entry.log_id, normal.log_id);
        match decoded.entry.payload {
            // The proposal tag is leader-local and not stored.
            EntryPayload::Normal(p) => {
                assert_eq!(p, Payload { units: 5, body: Bytes::from_static(b"records"), proposal: 0 })
            }
            other => panic!("unexpected {other:?}"),
        }

        let blank = Entry { log_id: log_id(4, 10), payload: EntryPayload::Blank };
        let d = decode_entry(encode_entry(45, &blank).unwrap()).unwrap();
        assert_eq!((d.base, d.units()), (45, 0));

        let m = three();
        let me = Entry { log_id: log_id(1, 0), payload: EntryPayload::Membership(m.clone()) };
        match decode_entry(encode_entry(0, &me).unwrap()).unwrap().entry.payload {
            EntryPayload::Membership(got) => assert_eq!(got, m),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn rejects_truncated_and_unknown_versions() {
        let e = Entry { log_id: log_id(1, 1), payload: EntryPayload::Blank };
        let good = encode_entry(0, &e).unwrap();
        assert!(decode_entry(good.slice(..5)).is_err());
        let mut bad = good.to_vec();
        bad[0] = 1;
        assert!(decode_entry(bad.into()).unwrap_err().contains("version 1"));
        let mut short = good.to_vec();
        short.truncate(FIXED_HEADER_LEN + 1);
        assert!(decode_entry(short.into()).is_err());
    }

    #[test]
    fn messages_round_trip() {
        let vote = Vote::new_committed(7, 2);
        assert_eq!(Vote::decode(vote.encode()).unwrap(), vote);
        assert_eq!(Vote::decode(Vote::new(3, 1).encode()).unwrap(), Vote::new(3, 1));
        let purged = Purged { log_id: log_id(2, 40), start_position: 1234, retained_from: None };
        assert_eq!(Purged::decode(purged.encode()).unwrap(), purged);
        let purged = Purged { retained_from: Some(31), ..purged };
        assert_eq!(Purged::decode(purged.encode()).unwrap(), purged);
        let marker = InstallMarker {
            last: log_id(3, 90),
            end_position: 5000,
            first_index: Some(70),
            entry_count: 21,
            start_position: 4100,
        };
        assert_eq!(InstallMarker::decode(marker.encode()).unwrap(), marker);

        let req = AppendEntriesRequest::<TypeConfig> {
            vote,
            prev_log_id: Some(log_id(6, 10)),
            leader_commit: None,
            entries: vec![
                Entry { log_id: log_id(7, 11), payload: EntryPayload::Blank },
                Entry {
                    log_id: log_id(7, 12),
                    payload: EntryPayload::Normal(Payload { units: 3, body: Bytes::from_static(b"abc"), proposal: 0 }),
                },
                Entry { log_id: log_id(7, 13), payload: EntryPayload::Membership(three()) },
            ],
        };
        let back = AppendEntriesRequest::<TypeConfig>::decode(req.encode()).unwrap();
        assert_eq!((back.vote, back.prev_log_id, back.leader_commit), (req.vote, req.prev_log_id, req.leader_commit));
        assert_eq!(back.entries, req.entries);

        let answers = || {
            [
                AppendEntriesResponse::Success,
                AppendEntriesResponse::PartialSuccess(Some(log_id(7, 12))),
                AppendEntriesResponse::PartialSuccess(None),
                AppendEntriesResponse::Conflict,
                AppendEntriesResponse::HigherVote(Vote::new(9, 3)),
            ]
        };
        for (answer, expected) in answers().into_iter().zip(answers()) {
            let ok: Result<_, RaftError<NodeId>> = Ok(answer);
            assert_eq!(Wire::decode(ok.encode()), Ok(Ok::<_, RaftError<NodeId>>(expected)));
        }
        let failed: Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> = Err(RaftError::Fatal(Fatal::Stopped));
        let err = <Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>::decode(failed.encode()).unwrap_err();
        assert!(err.contains("remote raft failed"), "{err}");

        let vr = VoteRequest { vote: Vote::new(4, 2), last_log_id: Some(log_id(3, 8)) };
        assert_eq!(VoteRequest::<NodeId>::decode(vr.encode()).unwrap(), vr);
        let va: Result<VoteResponse<NodeId>, RaftError<NodeId>> =
            Ok(VoteResponse { vote: Vote::new(4, 2), vote_granted: true, last_log_id: None });
        assert_eq!(<Result<VoteResponse<NodeId>, RaftError<NodeId>>>::decode(va.encode()), Ok(va));

        let meta = SnapshotMeta {
            last_log_id: Some(log_id(5, 100)),
            last_membership: StoredMembership::new(Some(log_id(1, 0)), three()),
            snapshot_id: "5-1-100-1".into(),
        };
        let sr = InstallSnapshotRequest::<TypeConfig> { vote, meta, offset: 64, data: vec![1, 2, 3], done: true };
        let back = InstallSnapshotRequest::<TypeConfig>::decode(sr.encode()).unwrap();
        assert_eq!(
            (back.vote, &back.meta, back.offset, &back.data, back.done),
            (sr.vote, &sr.meta, 64, &sr.data, true)
        );
        let mismatch: Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> =
            Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect: SnapshotSegmentId { id: "a".into(), offset: 0 },
                got: SnapshotSegmentId { id: "a".into(), offset: 64 },
            })));
        assert_eq!(Wire::decode(mismatch.encode()), Ok(mismatch));
    }

    #[test]
    fn garbage_is_refused_not_panicked_on() {
        for junk in [&b""[..], b"\xff\xff\xff", b"\x0a\x05\x08"] {
            let b = Bytes::copy_from_slice(junk);
            let _ = Vote::decode(b.clone());
            let _ = AppendEntriesRequest::<TypeConfig>::decode(b.clone());
            assert!(<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>::decode(b.clone()).is_err());
            let _ = InstallSnapshotRequest::<TypeConfig>::decode(b);
        }
    }

    /// Random values of every encoded type, from a fixed seed (the fuzz target `raft_codec`
    /// explores arbitrary bytes; this checks that what Rill writes reads back).
    mod random {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        use super::*;

        fn bytes(rng: &mut StdRng, max: usize) -> Bytes {
            let len = rng.gen_range(0..=max);
            (0..len).map(|_| rng.gen::<u8>()).collect::<Vec<u8>>().into()
        }

        fn log_id(rng: &mut StdRng) -> LogId {
            LogId::new(CommittedLeaderId::new(rng.gen(), rng.gen_range(0..8)), rng.gen())
        }

        fn membership(rng: &mut StdRng) -> Membership {
            let configs: Vec<BTreeSet<NodeId>> = (0..rng.gen_range(1..=2))
                .map(|_| (0..rng.gen_range(1..=5)).map(|_| rng.gen_range(1..10)).collect())
                .collect();
            let nodes: BTreeMap<NodeId, BasicNode> = (0..rng.gen_range(0..6))
                .map(|_| (rng.gen_range(1..12), BasicNode::new(format!("10.0.0.{}:7101", rng.gen::<u8>()))))
                .collect();
            Membership::new(configs, nodes)
        }

        fn entry(rng: &mut StdRng) -> Entry {
            let payload = match rng.gen_range(0..3) {
                0 => EntryPayload::Blank,
                1 => EntryPayload::Normal(Payload { units: rng.gen(), body: bytes(rng, 64), proposal: 0 }),
                _ => EntryPayload::Membership(membership(rng)),
            };
            Entry { log_id: log_id(rng), payload }
        }

        fn vote(rng: &mut StdRng) -> Vote {
            if rng.gen() {
                Vote::new_committed(rng.gen(), rng.gen_range(0..8))
            } else {
                Vote::new(rng.gen(), rng.gen_range(0..8))
            }
        }

        fn maybe_log_id(rng: &mut StdRng) -> Option<LogId> {
            rng.gen::<bool>().then(|| log_id(rng))
        }

        #[test]
        fn random_values_round_trip() {
            let mut rng = StdRng::seed_from_u64(0x5eed);
            for _ in 0..256 {
                let e = entry(&mut rng);
                let base = rng.gen_range(0..u64::MAX / 2);
                let d = decode_entry(encode_entry(base, &e).unwrap()).unwrap();
                assert_eq!((d.base, &d.entry), (base, &e));

                let v = vote(&mut rng);
                assert_eq!(Vote::decode(v.encode()), Ok(v));
                let id = log_id(&mut rng);
                assert_eq!(LogId::decode(id.encode()), Ok(id));
                let purged = Purged { log_id: log_id(&mut rng), start_position: rng.gen(), retained_from: rng.gen() };
                assert_eq!(Purged::decode(purged.encode()), Ok(purged));

                let req = AppendEntriesRequest::<TypeConfig> {
                    vote: vote(&mut rng),
                    prev_log_id: maybe_log_id(&mut rng),
                    leader_commit: maybe_log_id(&mut rng),
                    entries: (0..rng.gen_range(0..5)).map(|_| entry(&mut rng)).collect(),
                };
                let back = AppendEntriesRequest::<TypeConfig>::decode(req.encode()).unwrap();
                assert_eq!(
                    (back.vote, back.prev_log_id, back.leader_commit),
                    (req.vote, req.prev_log_id, req.leader_commit)
                );
                assert_eq!(back.entries, req.entries);

                let answer: Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> = Ok(match rng.gen_range(0..4) {
                    0 => AppendEntriesResponse::Success,
                    1 => AppendEntriesResponse::PartialSuccess(maybe_log_id(&mut rng)),
                    2 => AppendEntriesResponse::Conflict,
                    _ => AppendEntriesResponse::HigherVote(vote(&mut rng)),
                });
                assert_eq!(Wire::decode(answer.encode()), Ok(answer));

                let vr = VoteRequest { vote: vote(&mut rng), last_log_id: maybe_log_id(&mut rng) };
                assert_eq!(VoteRequest::<NodeId>::decode(vr.encode()), Ok(vr));
                let va: Result<VoteResponse<NodeId>, RaftError<NodeId>> = Ok(VoteResponse {
                    vote: vote(&mut rng),
                    vote_granted: rng.gen(),
                    last_log_id: maybe_log_id(&mut rng),
                });
                assert_eq!(Wire::decode(va.encode()), Ok(va));

                let meta = SnapshotMeta {
                    last_log_id: maybe_log_id(&mut rng),
                    last_membership: StoredMembership::new(maybe_log_id(&mut rng), membership(&mut rng)),
                    snapshot_id: format!("{}-{}", rng.gen::<u32>(), rng.gen::<u16>()),
                };
                let sr = InstallSnapshotRequest::<TypeConfig> {
                    vote: vote(&mut rng),
                    meta,
                    offset: rng.gen(),
                    data: bytes(&mut rng, 100).to_vec(),
                    done: rng.gen(),
                };
                let back = InstallSnapshotRequest::<TypeConfig>::decode(sr.encode()).unwrap();
                assert_eq!(
                    (back.vote, &back.meta, back.offset, &back.data, back.done),
                    (sr.vote, &sr.meta, sr.offset, &sr.data, sr.done)
                );
                let sa: Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> = if rng.gen()
                {
                    Ok(InstallSnapshotResponse { vote: vote(&mut rng) })
                } else {
                    Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                        expect: SnapshotSegmentId { id: format!("{}", rng.gen::<u8>()), offset: rng.gen() },
                        got: SnapshotSegmentId { id: format!("{}", rng.gen::<u8>()), offset: rng.gen() },
                    })))
                };
                assert_eq!(Wire::decode(sa.encode()), Ok(sa));
            }
        }
    }
}

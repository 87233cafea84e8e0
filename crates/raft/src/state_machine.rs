//! State machines: what a group's owner implements ([`GroupStateMachine`]) and the adapter that
//! plugs it into openraft ([`SmStore`]).
//!
//! The adapter tracks what every state machine needs — last applied log id, membership and the
//! applied *position* (the end position of the last applied entry, i.e. a partition's high
//! watermark) — and persists snapshots in the engine's `State` keyspace. On restart the state
//! machine is restored from its latest snapshot and openraft re-applies the committed log after
//! it.
//!
//! A snapshot names the first position whose entries must travel with it
//! ([`GroupStateMachine::retained_from`]: a partition's log start offset): a record partition's
//! log is its data, so its log is purged only below that point, and a follower that needs the
//! snapshot receives those entries with the state ([`crate::transfer`]). A group whose snapshot
//! is its whole state names none, and its log is purged behind the snapshot.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use prost::Message;
use rill_proto::raft as pb;
use rill_storage::{Engine, Keyspace, WriteBatch};

use crate::codec;
use crate::keys;
use crate::log_store::LogStore;
use crate::transfer::{SnapshotState, SnapshotStream};
use crate::types::{
    Entry, GroupId, LogId, Payload, Response, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};

/// The deterministic state machine of one group, supplied by its owner (metadata, partition).
///
/// Every replica applies the same committed entries in the same order and must reach the same
/// state; implementations must not read clocks, randomness or local configuration in `apply`.
pub trait GroupStateMachine: Send + 'static {
    /// Applies a committed normal entry occupying positions `base .. base + payload.units`.
    /// Returns the answer for the proposer.
    fn apply(&mut self, log_id: &LogId, base: u64, payload: &Payload) -> Bytes;

    /// Serializes the full state.
    fn snapshot(&self) -> Result<Bytes, String>;

    /// Replaces the state with a snapshot made by [`GroupStateMachine::snapshot`].
    fn restore(&mut self, data: &[u8]) -> Result<(), String>;

    /// The first position whose entries a snapshot taken now must carry to a follower, because
    /// the state refers to them (a partition's log start offset: its records from there on).
    /// `None` (the default): the snapshot is the whole state.
    fn retained_from(&self) -> Option<u64> {
        None
    }

    /// Called after a snapshot from the leader replaced the state: `position` is the end
    /// position it covers (a partition's high watermark), which `restore` does not see.
    fn installed(&mut self, position: u64) {
        let _ = position;
    }
}

/// What the adapter tracks for every group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Last applied log id.
    pub log_id: Option<LogId>,
    /// Last applied membership.
    pub membership: StoredMembership,
    /// End position of the last applied entry: every position below it is committed and applied.
    pub position: u64,
}

/// A snapshot as persisted: openraft's metadata, the adapter's applied state, the state
/// machine's bytes and the first position whose entries go with it (`proto/rill/raft.proto`:
/// `StoredSnapshot`; what is sent is [`crate::transfer`]'s stream).
struct StoredSnapshot {
    meta: SnapshotMeta,
    applied: Applied,
    data: Bytes,
    retained_from: Option<u64>,
}

impl StoredSnapshot {
    fn encode(&self) -> Bytes {
        pb::StoredSnapshot {
            meta: Some(codec::snapshot_meta_to(&self.meta)),
            applied: Some(codec::applied_to(&self.applied)),
            data: self.data.clone(),
            retained_from: self.retained_from,
        }
        .encode_to_vec()
        .into()
    }

    fn decode(bytes: Bytes) -> Result<Self, String> {
        let p = pb::StoredSnapshot::decode(bytes).map_err(|e| format!("undecodable snapshot: {e}"))?;
        Ok(Self {
            meta: codec::snapshot_meta_from(p.meta.ok_or("snapshot metadata is missing")?),
            applied: codec::applied_from(p.applied.ok_or("snapshot applied state is missing")?),
            data: p.data,
            retained_from: p.retained_from,
        })
    }

    fn state(&self) -> SnapshotState {
        SnapshotState { applied: self.applied.clone(), data: self.data.clone(), retained_from: self.retained_from }
    }
}

struct Inner<M> {
    sm: M,
    applied: Applied,
    snapshot: Option<StoredSnapshot>,
    snapshot_seq: u64,
}

/// The openraft state machine adapter around a [`GroupStateMachine`]. Clones share state.
pub struct SmStore<M> {
    group: GroupId,
    engine: Arc<dyn Engine>,
    /// The group's log: snapshots carry entries from it and install entries into it.
    log: LogStore,
    inner: Arc<Mutex<Inner<M>>>,
}

impl<M> Clone for SmStore<M> {
    fn clone(&self) -> Self {
        Self { group: self.group, engine: self.engine.clone(), log: self.log.clone(), inner: self.inner.clone() }
    }
}

fn sm_err(e: impl ToString) -> StorageError {
    StorageIOError::write_state_machine(AnyError::error(e)).into()
}

fn snap_err(e: impl ToString) -> StorageError {
    StorageIOError::read_snapshot(None, AnyError::error(e)).into()
}

impl<M: GroupStateMachine> SmStore<M> {
    /// Wraps `sm`, restoring it from the group's persisted snapshot when there is one.
    pub fn open(group: GroupId, engine: Arc<dyn Engine>, log: LogStore, mut sm: M) -> crate::Result<Self> {
        let corrupt = |reason: String| crate::Error::Corrupt { group, reason };
        let stored = engine.get(Keyspace::State, &keys::group_tag(group, keys::SNAPSHOT))?;
        let (applied, snapshot) = match stored {
            Some(b) => {
                let s = StoredSnapshot::decode(b).map_err(corrupt)?;
                sm.restore(&s.data).map_err(corrupt)?;
                (s.applied.clone(), Some(s))
            }
            None => (Applied::default(), None),
        };
        Ok(Self { group, engine, log, inner: Arc::new(Mutex::new(Inner { sm, applied, snapshot, snapshot_seq: 0 })) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner<M>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` with the state machine (for reads by the group's owner).
    pub fn with<R>(&self, f: impl FnOnce(&M, &Applied) -> R) -> R {
        let inner = self.lock();
        f(&inner.sm, &inner.applied)
    }

    /// What has been applied so far.
    pub fn applied(&self) -> Applied {
        self.lock().applied.clone()
    }

    /// The newest snapshot's last log index and the first position it carries entries from.
    pub fn snapshot_point(&self) -> Option<(u64, Option<u64>)> {
        let inner = self.lock();
        let s = inner.snapshot.as_ref()?;
        Some((s.meta.last_log_id?.index, s.retained_from))
    }

    /// The position after the newest snapshot's last entry: what it covers.
    pub fn snapshot_position(&self) -> Option<u64> {
        self.lock().snapshot.as_ref().map(|s| s.applied.position)
    }

    fn persist_batch(&self, snapshot: &StoredSnapshot) -> WriteBatch {
        let mut b = WriteBatch::new();
        b.put(Keyspace::State, keys::group_tag(self.group, keys::SNAPSHOT).to_vec(), snapshot.encode());
        b
    }

    fn persist(&self, snapshot: &StoredSnapshot) -> Result<(), StorageError> {
        self.engine.write(self.persist_batch(snapshot), false).map_err(sm_err)
    }

    /// The snapshot as sent to followers: the state, then the entries it carries, read from the
    /// log as they are sent.
    fn to_openraft(&self, s: &StoredSnapshot) -> Snapshot<TypeConfig> {
        let stream = SnapshotStream::outgoing(self.log.clone(), s.meta.last_log_id, s.state());
        Snapshot { meta: s.meta.clone(), snapshot: Box::new(stream) }
    }
}

impl<M: GroupStateMachine> RaftSnapshotBuilder<TypeConfig> for SmStore<M> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let stored = {
            let mut inner = self.lock();
            let data = inner.sm.snapshot().map_err(sm_err)?;
            inner.snapshot_seq += 1;
            let last = inner.applied.log_id;
            let snapshot_id = match last {
                Some(l) => format!("{}-{}-{}-{}", l.leader_id.term, l.leader_id.node_id, l.index, inner.snapshot_seq),
                None => format!("none-{}", inner.snapshot_seq),
            };
            let meta =
                SnapshotMeta { last_log_id: last, last_membership: inner.applied.membership.clone(), snapshot_id };
            StoredSnapshot { meta, applied: inner.applied.clone(), data, retained_from: inner.sm.retained_from() }
        };
        self.persist(&stored)?;
        let out = self.to_openraft(&stored);
        self.lock().snapshot = Some(stored);
        Ok(out)
    }
}

impl<M: GroupStateMachine> RaftStateMachine<TypeConfig> for SmStore<M> {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let inner = self.lock();
        Ok((inner.applied.log_id, inner.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for entry in entries {
            let Inner { sm, applied, .. } = &mut *inner;
            applied.log_id = Some(entry.log_id);
            match &entry.payload {
                EntryPayload::Blank => out.push(Response::default()),
                EntryPayload::Normal(p) => {
                    let base = applied.position;
                    applied.position += u64::from(p.units);
                    out.push(Response(sm.apply(&entry.log_id, base, p)));
                }
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    out.push(Response::default());
                }
            }
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotStream>, StorageError> {
        // Whatever an earlier, unfinished transfer staged is dropped first.
        self.log.clear_staging().map_err(sm_err)?;
        Ok(Box::new(SnapshotStream::incoming(self.log.clone())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotStream>,
    ) -> Result<(), StorageError> {
        let result = self.install(meta, &snapshot).await;
        if result.is_err() {
            self.log.abandon_install();
        }
        result
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let inner = self.lock();
        Ok(inner.snapshot.as_ref().map(|s| self.to_openraft(s)))
    }
}

impl<M: GroupStateMachine> SmStore<M> {
    /// Installs a snapshot received in full (see [`LogStore::install`]). The log side runs on
    /// the blocking pool: it syncs, and copies every carried entry (hundreds of MB for a
    /// record partition's retained data), which on an async worker stalls the node's other
    /// groups and its liveness pings long enough for peers to count it as down.
    async fn install(&self, meta: &SnapshotMeta, snapshot: &SnapshotStream) -> Result<(), StorageError> {
        let received = snapshot.received().cloned().ok_or_else(|| snap_err("snapshot was not received in full"))?;
        if Some(received.marker.last) != meta.last_log_id {
            return Err(snap_err(format!(
                "snapshot received up to {} but announced up to {:?}",
                received.marker.last, meta.last_log_id
            )));
        }
        let state = received.state;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            applied: state.applied,
            data: state.data,
            retained_from: state.retained_from,
        };
        self.lock().sm.restore(&stored.data).map_err(snap_err)?;
        // The state is persisted with the installation's marker, then the carried entries move
        // into the log (see `LogStore::install`).
        let (log, batch, marker) = (self.log.clone(), self.persist_batch(&stored), received.marker);
        rill_rt::blocking(move || log.install(marker, batch)).await.map_err(sm_err)?;
        let mut inner = self.lock();
        inner.sm.installed(stored.applied.position);
        inner.applied = stored.applied.clone();
        inner.snapshot = Some(stored);
        Ok(())
    }
}

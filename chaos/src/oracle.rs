//! White-box oracles: what only the simulator can see — synced disk state at the moment of an
//! acknowledgement, replica watermarks over time, every replica's stored log and (compacted
//! topics) its applied cleaning point.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rill_raft::types::NodeId;
use rill_raft::{codec, keys, GroupId};
use rill_storage::{Keyspace, MemEngine};

use crate::checkers::ack_durability::AckCheck;
use crate::checkers::replicas_agree::ReplicaLog;
use crate::checkers::watermarks::WatermarkSample;
use crate::cluster::SimCluster;

/// Counts synced copies of acknowledged records. Cheap to clone; usable from client tasks.
#[derive(Clone)]
pub struct AckOracle {
    disks: BTreeMap<NodeId, MemEngine>,
    groups: Vec<GroupId>,
    compacted: bool,
    checks: Arc<Mutex<Vec<AckCheck>>>,
}

impl AckOracle {
    /// An oracle over `cluster`'s disks; `groups[p]` is partition `p`'s Raft group, of a
    /// `compacted` topic or not.
    pub fn new(cluster: &SimCluster, groups: Vec<GroupId>, compacted: bool) -> Self {
        let disks = cluster.ids().into_iter().filter_map(|id| cluster.disk(id).map(|d| (id, d.clone()))).collect();
        Self { disks, groups, compacted, checks: Arc::default() }
    }

    /// Watches every acks=1 answer at the moment the leader gives it: its entry must be in the
    /// leader's synced state then (later, a new leader may truncate it — acks=1 allows that).
    pub fn watch_leader_acks(&self) {
        let disks = self.disks.clone();
        let groups = self.groups.clone();
        let checks = self.checks.clone();
        let compacted = self.compacted;
        rill_rt::probe::set_hook(move |probe| {
            let rill_rt::probe::Probe::LeaderAck { node, group, offset, .. } = *probe;
            let Some(partition) = groups.iter().position(|g| *g == group) else { return };
            let durable = disks.get(&node).is_some_and(|d| durable_at(d, group, offset, None).holds(compacted));
            let check =
                AckCheck { partition: partition as u32, offset, durable_copies: usize::from(durable), required: 1 };
            checks.lock().unwrap_or_else(|p| p.into_inner()).push(check);
        });
    }

    /// Records how many disks hold `value` at `partition`/`offset` in their synced state when
    /// the client receives an acks=all acknowledgement (committed entries only gain copies, so
    /// this is as strict as checking at the server).
    pub fn on_ack(&self, partition: u32, offset: u64, value: &str, required: usize) {
        let Some(group) = self.groups.get(partition as usize).copied() else { return };
        let durable_copies =
            self.disks.values().filter(|d| durable_at(d, group, offset, Some(value)).holds(self.compacted)).count();
        let check = AckCheck { partition, offset, durable_copies, required };
        self.checks.lock().unwrap_or_else(|p| p.into_inner()).push(check);
    }

    /// Every check so far.
    pub fn checks(&self) -> Vec<AckCheck> {
        self.checks.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What a disk's synced state has at an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durable {
    /// The expected value (or, when none is expected, any record).
    Holds,
    /// Another value.
    Other,
    /// A batch whose span covers the offset, without its record: compaction removed it
    /// (possible only on a compacted topic, where a record can be superseded between the
    /// leader's answer and the client's receiving it).
    Compacted,
    /// Below the first position the disk still stores: deleted because the partition's log
    /// start passed it (retention or `DeleteRecords` between the leader's answer and the
    /// client's receiving it). Whether that deletion was allowed is the log-start checkers'
    /// question, not this one's.
    Deleted,
    /// Nothing.
    Nothing,
}

impl Durable {
    /// Whether this counts as a synced copy: the record, a deleted one, or on a `compacted`
    /// topic the batch compaction emptied of it.
    fn holds(self, compacted: bool) -> bool {
        self == Durable::Holds || self == Durable::Deleted || (compacted && self == Durable::Compacted)
    }
}

/// The first position `disk` still stores for `group`, by its synced purge record.
fn durable_start(disk: &MemEngine, group: GroupId) -> u64 {
    use codec::Wire;
    disk.durable_get(Keyspace::RaftMeta, &keys::group_tag(group, keys::PURGED))
        .and_then(|b| codec::Purged::decode(b).ok())
        .map_or(0, |p| p.start_position)
}

/// What `disk`'s synced state has at `offset` of `group`, compared with `value` (any record
/// counts when `value` is `None`).
fn durable_at(disk: &MemEngine, group: GroupId, offset: u64, value: Option<&str>) -> Durable {
    if offset < durable_start(disk, group) {
        return Durable::Deleted;
    }
    let found =
        disk.durable_scan_rev(Keyspace::LogIndex, &keys::group_u64(group, 0), &keys::group_u64(group, offset + 1), 1);
    let Some((_, index)) = found.first() else { return Durable::Nothing };
    let Ok(index) = <[u8; 8]>::try_from(&index[..]) else { return Durable::Nothing };
    let Some(stored) = disk.durable_get(Keyspace::RaftLog, &keys::group_u64(group, u64::from_be_bytes(index))) else {
        return Durable::Nothing;
    };
    let Ok(entry) = codec::decode_entry(stored) else { return Durable::Nothing };
    let openraft::EntryPayload::Normal(payload) = entry.entry.payload else { return Durable::Nothing };
    let Ok(batches) = rill_broker::command::decode_append(payload.body) else { return Durable::Nothing };
    let mut base = entry.base;
    for b in batches {
        let Ok(batch) = rill_records::decode(&b, rill_records::MAX_DECOMPRESSED_BATCH_BYTES) else {
            return Durable::Nothing;
        };
        for r in &batch.records {
            if base + u64::try_from(r.offset_delta).unwrap_or(0) == offset {
                return match value {
                    Some(v) if record_id(r).as_deref() != Some(v) => Durable::Other,
                    _ => Durable::Holds,
                };
            }
        }
        // A batch keeps its span of offsets whatever compaction removed from it.
        let span = batch.info.span();
        if (base..base + span).contains(&offset) {
            return Durable::Compacted;
        }
        base += span;
    }
    Durable::Nothing
}

/// A stored record's unique id: its `id` header (keyed workloads), else its value.
fn record_id(r: &rill_records::Record) -> Option<String> {
    let id = r.headers.iter().find(|h| &h.key[..] == crate::workload::ID_HEADER.as_bytes());
    match id {
        Some(h) => h.value.as_deref().map(|v| String::from_utf8_lossy(v).into_owned()),
        None => r.value.as_deref().map(|v| String::from_utf8_lossy(v).into_owned()),
    }
}

/// Samples every live replica's high watermark and log end.
pub fn sample_watermarks(cluster: &SimCluster, out: &mut Vec<WatermarkSample>) {
    for id in cluster.ids() {
        let Some(node) = cluster.node(id) else { continue };
        let incarnation = cluster.incarnation(id);
        for p in node.partitions() {
            let s = p.state();
            out.push(WatermarkSample {
                node: id,
                incarnation,
                group: p.group(),
                high_watermark: s.high_watermark,
                log_end: s.log_end_offset,
            });
        }
    }
}

/// Every live replica's stored data entries and high watermark.
pub fn replica_logs(cluster: &SimCluster) -> Result<Vec<ReplicaLog>, String> {
    let mut out = Vec::new();
    for id in cluster.ids() {
        let Some(node) = cluster.node(id) else { continue };
        for p in node.partitions() {
            let entries = p.entry_bodies().map_err(|e| format!("node {id} group {}: {e}", p.group()))?;
            out.push(ReplicaLog {
                node: id,
                group: p.group(),
                high_watermark: p.high_watermark(),
                log_start: p.applied_log_start(),
                entries,
                cleaning: p.config().compacted().then(|| p.cleaning_point()),
            });
        }
    }
    Ok(out)
}

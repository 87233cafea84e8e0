//! White-box oracles: what only the simulator can see — synced disk state at the moment of an
//! acknowledgement, replica watermarks over time, and every replica's stored log.

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
    checks: Arc<Mutex<Vec<AckCheck>>>,
}

impl AckOracle {
    /// An oracle over `cluster`'s disks; `groups[p]` is partition `p`'s Raft group.
    pub fn new(cluster: &SimCluster, groups: Vec<GroupId>) -> Self {
        let disks = cluster.ids().into_iter().filter_map(|id| cluster.disk(id).map(|d| (id, d.clone()))).collect();
        Self { disks, groups, checks: Arc::default() }
    }

    /// Records how many disks hold `value` at `partition`/`offset` in their synced state.
    pub fn on_ack(&self, partition: u32, offset: u64, value: &str, required: usize) {
        let Some(group) = self.groups.get(partition as usize).copied() else { return };
        let durable_copies = self.disks.values().filter(|d| durably_holds(d, group, offset, value)).count();
        self.checks.lock().unwrap_or_else(|p| p.into_inner()).push(AckCheck {
            partition,
            offset,
            durable_copies,
            required,
        });
    }

    /// Every check so far.
    pub fn checks(&self) -> Vec<AckCheck> {
        self.checks.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// True when `disk`'s synced state has `value` at `offset` of `group`.
fn durably_holds(disk: &MemEngine, group: GroupId, offset: u64, value: &str) -> bool {
    let found =
        disk.durable_scan_rev(Keyspace::LogIndex, &keys::group_u64(group, 0), &keys::group_u64(group, offset + 1), 1);
    let Some((_, index)) = found.first() else { return false };
    let Ok(index) = <[u8; 8]>::try_from(&index[..]) else { return false };
    let Some(stored) = disk.durable_get(Keyspace::RaftLog, &keys::group_u64(group, u64::from_be_bytes(index))) else {
        return false;
    };
    let Ok(entry) = codec::decode_entry(stored) else { return false };
    let openraft::EntryPayload::Normal(payload) = entry.entry.payload else { return false };
    let Ok(batches) = rill_broker::command::decode_append(payload.body) else { return false };
    let mut base = entry.base;
    for b in batches {
        if let Ok(records) = rill_proto::batch::decode(&b) {
            for (i, r) in records.iter().enumerate() {
                if base + i as u64 == offset {
                    return r.value.as_ref() == value.as_bytes();
                }
            }
        }
        base += u64::from(b.record_count);
    }
    false
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
            out.push(ReplicaLog { node: id, group: p.group(), high_watermark: p.high_watermark(), entries });
        }
    }
    Ok(out)
}

//! [`LeaderDirectory`]: which node leads each Raft group, as far as this node knows — for groups
//! it does not host too, so routing questions ("who leads the partition that id X hashes to?",
//! a client's metadata) are answered from memory, without asking every replica.
//!
//! Every node reports the groups it leads, with their terms, in its answers to the node-level
//! pings (see [`crate::liveness`]): a ping names the version of the answering node's report the
//! pinging node has, and the answer carries the report only when it changed. A report's version
//! starts at a random number on every start, so a restarted node is never mistaken for its
//! earlier self. A lookup takes the claim with the highest term among live nodes: a node that
//! lost leadership and has not reported yet claims an older term.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use rill_proto::internal::{LeadershipReport, LedGroup};

use crate::liveness::Liveness;
use crate::types::{GroupId, NodeId};

/// A node silent for longer than this (three missed pings) is not reported as a leader: a
/// client told "no leader yet" waits for the election instead of sending to a dead node.
pub const CLAIMS_EXPIRE_AFTER: Duration = Duration::from_millis(300);

#[derive(Debug, Default)]
struct Report {
    version: u64,
    /// Group → the term it is led in.
    groups: BTreeMap<GroupId, u64>,
}

/// What this node knows of every group's leader.
#[derive(Debug)]
pub struct LeaderDirectory {
    local: Mutex<Report>,
    peers: Mutex<HashMap<NodeId, Report>>,
}

impl Default for LeaderDirectory {
    fn default() -> Self {
        Self::new()
    }
}

impl LeaderDirectory {
    /// An empty directory; this node's report version starts at a random number.
    pub fn new() -> Self {
        let local = Report { version: rill_rt::random_u64(), groups: BTreeMap::new() };
        Self { local: Mutex::new(local), peers: Mutex::default() }
    }

    /// Records the groups this node leads now (group → term); a change bumps the report's
    /// version.
    pub fn set_local(&self, groups: BTreeMap<GroupId, u64>) {
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        if local.groups != groups {
            local.groups = groups;
            local.version = local.version.wrapping_add(1);
        }
    }

    /// This node's report for a peer that has `known_version` of it: `None` when that is
    /// current.
    pub fn report_for(&self, known_version: u64) -> Option<LeadershipReport> {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        (local.version != known_version).then(|| LeadershipReport {
            version: local.version,
            groups: local.groups.iter().map(|(group, term)| LedGroup { group_id: *group, term: *term }).collect(),
        })
    }

    /// The version of `node`'s report this node has (0 when none).
    pub fn known_version(&self, node: NodeId) -> u64 {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).get(&node).map_or(0, |r| r.version)
    }

    /// Takes `node`'s report.
    pub fn learn(&self, node: NodeId, report: LeadershipReport) {
        let groups = report.groups.into_iter().map(|g| (g.group_id, g.term)).collect();
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).insert(node, Report { version: report.version, groups });
    }

    /// The leader of `group` and its term by the reports of this node and of the peers heard
    /// from within [`CLAIMS_EXPIRE_AFTER`]: the claim with the highest term.
    pub fn leader(&self, group: GroupId, self_id: NodeId, liveness: &Liveness) -> Option<(NodeId, u64)> {
        let mut best: Option<(NodeId, u64)> = None;
        let mut consider = |node: NodeId, term: u64| {
            if best.is_none_or(|(_, t)| term > t) {
                best = Some((node, term));
            }
        };
        if let Some(term) = self.local.lock().unwrap_or_else(|p| p.into_inner()).groups.get(&group) {
            consider(self_id, *term);
        }
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        for (node, report) in peers.iter() {
            if let Some(term) = report.groups.get(&group) {
                if liveness.silent_for(*node) <= CLAIMS_EXPIRE_AFTER {
                    consider(*node, *term);
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reports_travel_only_when_changed_and_the_highest_term_wins() {
        let d = LeaderDirectory::new();
        let liveness = Liveness::new();
        assert!(d.report_for(0).is_some() || d.local.lock().unwrap().version == 0);
        d.set_local([(7, 3)].into());
        let report = d.report_for(0).expect("a new report");
        let v = report.version;
        assert_eq!(report.groups, vec![LedGroup { group_id: 7, term: 3 }]);
        assert!(d.report_for(v).is_none(), "a peer with the current version gets nothing");
        d.set_local([(7, 3)].into());
        assert!(d.report_for(v).is_none(), "the same groups do not bump the version");

        // Node 2 claims group 7 at a later term; node 3 at an older one.
        liveness.heard(2, 11);
        liveness.heard(3, 12);
        d.learn(2, LeadershipReport { version: 5, groups: vec![LedGroup { group_id: 7, term: 4 }] });
        d.learn(
            3,
            LeadershipReport {
                version: 9,
                groups: vec![LedGroup { group_id: 7, term: 2 }, LedGroup { group_id: 8, term: 1 }],
            },
        );
        assert_eq!(d.known_version(2), 5);
        assert_eq!(d.leader(7, 1, &liveness), Some((2, 4)));
        assert_eq!(d.leader(8, 1, &liveness), Some((3, 1)));
        assert_eq!(d.leader(9, 1, &liveness), None);
    }
}

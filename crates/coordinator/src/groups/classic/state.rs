//! A classic group's replicated record — what Kafka writes of a group (its `GroupMetadataValue`):
//! generation, protocol type, selected protocol, leader, and every member with its protocols and
//! the assignment the leader gave it — and how a [`pb::ClassicGroupRecord`] applies.
//!
//! The record is written whole, only at the points Kafka writes it (a generation's assignments
//! complete, the group becomes empty, a static member's id is replaced); join phases, parked
//! requests and timers are the leader's soft state ([`super::engine`]). Applying is bookkeeping:
//! the record was decided on the leader and applies only if the group is still at the version it
//! was decided from.
//!
//! Kafka's record keeps each member's metadata for the selected protocol only; this one keeps
//! every member's whole protocol list, so that after a failover a member rejoining with the same
//! protocols is recognised as unchanged (and a follower is not made to rebalance the group).

use std::collections::BTreeMap;

use bytes::Bytes;
use rill_proto::coordinator as pb;

use crate::groups::group::Applied;

/// A protocol a member supports: a name (an assignor, for consumers) and opaque metadata (a
/// consumer's subscription).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Protocol {
    /// Its name.
    pub name: String,
    /// What the member says with it (opaque to the coordinator).
    pub metadata: Bytes,
}

/// One member of a classic group, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassicMember {
    /// Its id (given by the coordinator).
    pub member_id: String,
    /// A static member's `group.instance.id`.
    pub instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// Where the client connected from.
    pub client_host: String,
    /// How long it may go without a heartbeat.
    pub session_timeout_ms: u32,
    /// How long a join or sync phase waits for it.
    pub rebalance_timeout_ms: u32,
    /// The protocols it supports, most preferred first.
    pub protocols: Vec<Protocol>,
    /// What the leader assigned it for the group's generation (empty: nothing, or not yet).
    pub assignment: Bytes,
}

impl ClassicMember {
    /// The metadata it sent with protocol `name` (empty when it does not support it).
    pub fn metadata(&self, name: &str) -> Bytes {
        self.protocols.iter().find(|p| p.name == name).map(|p| p.metadata.clone()).unwrap_or_default()
    }
}

/// One classic group as last written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassicGroup {
    /// The group's id.
    pub group_id: String,
    /// Bumped by every applied record: the compare-and-set key of the next one.
    pub version: u64,
    /// The generation the members' assignments belong to.
    pub generation: i32,
    /// The members' protocol type (`consumer`, `connect`, ...).
    pub protocol_type: String,
    /// The selected protocol (`None` without members).
    pub protocol: Option<String>,
    /// The leader's member id (`None` without members).
    pub leader: Option<String>,
    /// Members by id.
    pub members: BTreeMap<String, ClassicMember>,
    /// The coordinator's clock when this was decided (ms).
    pub updated_ms: i64,
}

impl ClassicGroup {
    /// True when the group has members.
    pub fn has_members(&self) -> bool {
        !self.members.is_empty()
    }

    /// The member with static instance id `instance_id`.
    pub fn member_by_instance(&self, instance_id: &str) -> Option<&ClassicMember> {
        self.members.values().find(|m| m.instance_id.as_deref() == Some(instance_id))
    }

    /// The group as stored (its version included).
    pub fn to_proto(&self) -> pb::ClassicGroupState {
        pb::ClassicGroupState {
            group_id: self.group_id.clone(),
            version: self.version,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone().unwrap_or_default(),
            leader: self.leader.clone().unwrap_or_default(),
            members: self.members.values().map(member_to_proto).collect(),
            updated_ms: self.updated_ms,
        }
    }

    /// A group read back from its stored form.
    pub fn from_proto(s: &pb::ClassicGroupState) -> Self {
        let non_empty = |v: &String| (!v.is_empty()).then(|| v.clone());
        ClassicGroup {
            group_id: s.group_id.clone(),
            version: s.version,
            generation: s.generation,
            protocol_type: s.protocol_type.clone(),
            protocol: non_empty(&s.protocol),
            leader: non_empty(&s.leader),
            members: s.members.iter().map(|m| (m.member_id.clone(), member_from_proto(m))).collect(),
            updated_ms: s.updated_ms,
        }
    }
}

/// Every classic group of one `__consumer_offsets` partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassicGroups {
    groups: BTreeMap<String, ClassicGroup>,
}

impl ClassicGroups {
    /// The group `group_id`.
    pub fn get(&self, group_id: &str) -> Option<&ClassicGroup> {
        self.groups.get(group_id)
    }

    /// The group's version (0 when it has no record): what the next record must expect.
    pub fn version(&self, group_id: &str) -> u64 {
        self.groups.get(group_id).map_or(0, |g| g.version)
    }

    /// True when `group_id` has a record with members.
    pub fn has_members(&self, group_id: &str) -> bool {
        self.groups.get(group_id).is_some_and(ClassicGroup::has_members)
    }

    /// Every group, by id.
    pub fn iter(&self) -> impl Iterator<Item = &ClassicGroup> {
        self.groups.values()
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Forgets `group_id` (deleted, or taken over by a KIP-848 group while it had no members).
    pub(crate) fn remove(&mut self, group_id: &str) {
        self.groups.remove(group_id);
    }

    /// Applies `record` if the group is at the version it was decided from. A record without a
    /// group changes nothing (every replica skips it alike).
    pub fn apply(&mut self, record: &pb::ClassicGroupRecord) -> Applied {
        let Some(group) = &record.group else { return Applied::Conflict };
        let current = self.version(&group.group_id);
        if current != record.expect_version {
            return Applied::Conflict;
        }
        let mut g = ClassicGroup::from_proto(group);
        g.version = current + 1;
        self.groups.insert(g.group_id.clone(), g);
        Applied::Changed
    }

    /// Every group as stored in a snapshot.
    pub fn to_proto(&self) -> Vec<pb::ClassicGroupState> {
        self.groups.values().map(ClassicGroup::to_proto).collect()
    }

    /// The groups of a snapshot.
    pub fn from_proto(groups: &[pb::ClassicGroupState]) -> Self {
        Self { groups: groups.iter().map(|g| (g.group_id.clone(), ClassicGroup::from_proto(g))).collect() }
    }
}

/// A member as stored.
pub fn member_to_proto(m: &ClassicMember) -> pb::ClassicMember {
    pb::ClassicMember {
        member_id: m.member_id.clone(),
        instance_id: m.instance_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        session_timeout_ms: m.session_timeout_ms,
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        protocols: m
            .protocols
            .iter()
            .map(|p| pb::ClassicProtocol { name: p.name.clone(), metadata: p.metadata.clone() })
            .collect(),
        assignment: m.assignment.clone(),
    }
}

fn member_from_proto(m: &pb::ClassicMember) -> ClassicMember {
    ClassicMember {
        member_id: m.member_id.clone(),
        instance_id: m.instance_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        session_timeout_ms: m.session_timeout_ms,
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        protocols: m
            .protocols
            .iter()
            .map(|p| Protocol { name: p.name.clone(), metadata: p.metadata.clone() })
            .collect(),
        assignment: m.assignment.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(generation: i32, members: &[&str]) -> ClassicGroup {
        ClassicGroup {
            group_id: "g".into(),
            generation,
            protocol_type: "consumer".into(),
            protocol: Some("range".into()),
            leader: members.first().map(|m| m.to_string()),
            members: members
                .iter()
                .map(|id| {
                    let m = ClassicMember {
                        member_id: id.to_string(),
                        instance_id: (*id == "b").then(|| "instance-b".to_string()),
                        client_id: "client".into(),
                        client_host: "/10.0.0.1".into(),
                        session_timeout_ms: 10_000,
                        rebalance_timeout_ms: 30_000,
                        protocols: vec![Protocol { name: "range".into(), metadata: Bytes::from_static(b"sub") }],
                        assignment: Bytes::from(format!("assignment of {id}")),
                    };
                    (id.to_string(), m)
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn records_apply_only_at_the_version_they_were_decided_from() {
        let mut groups = ClassicGroups::default();
        let first = pb::ClassicGroupRecord { expect_version: 0, group: Some(group(1, &["a", "b"]).to_proto()) };
        assert_eq!(groups.apply(&first), Applied::Changed);
        assert_eq!(groups.version("g"), 1);
        assert_eq!(groups.apply(&first), Applied::Conflict, "decided before the first applied");
        let second = pb::ClassicGroupRecord { expect_version: 1, group: Some(group(2, &["a"]).to_proto()) };
        assert_eq!(groups.apply(&second), Applied::Changed);
        let g = groups.get("g").unwrap();
        assert_eq!((g.version, g.generation, g.members.len()), (2, 2, 1));
        assert_eq!(g.members["a"].metadata("range"), Bytes::from_static(b"sub"));
        assert_eq!(g.members["a"].metadata("sticky"), Bytes::new());
        assert_eq!(groups.apply(&pb::ClassicGroupRecord { expect_version: 2, group: None }), Applied::Conflict);
    }

    #[test]
    fn the_stored_form_round_trips() {
        let mut g = group(7, &["a", "b"]);
        g.version = 3;
        g.updated_ms = 42;
        assert_eq!(ClassicGroup::from_proto(&g.to_proto()), g);
        assert_eq!(g.member_by_instance("instance-b").map(|m| m.member_id.as_str()), Some("b"));
        let empty = ClassicGroup { group_id: "e".into(), generation: 4, ..Default::default() };
        let back = ClassicGroup::from_proto(&empty.to_proto());
        assert_eq!((back.protocol, back.leader), (None, None));
        let groups = ClassicGroups::from_proto(&[g.to_proto(), empty.to_proto()]);
        assert_eq!(ClassicGroups::from_proto(&groups.to_proto()), groups);
        assert!(groups.has_members("g") && !groups.has_members("e") && !groups.has_members("x"));
    }
}

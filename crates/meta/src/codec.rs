//! The versioned encoding of the metadata: its state (group 0's snapshot), its commands (group
//! 0's log entries, also forwarded between nodes) and their results — the prost messages of
//! `proto/rill/meta.proto`. A field added later reads as its default from older data; topic
//! settings missing from older data take the topic's defaults.

use bytes::Bytes;
use prost::Message;
use rill_proto::meta as pb;

use crate::config::{ConfigEdits, TopicConfig};
use crate::error::{MetaError, MetaErrorKind};
use crate::group_config::GroupConfigEntries;
use crate::state::{
    MetaCommand, MetaResult, MetaState, NodeInfo, PartitionAssignment, PartitionKind, TopicId, TopicMeta,
};

fn decode_pb<M: Message + Default>(bytes: &[u8], what: &str) -> Result<M, String> {
    M::decode(bytes).map_err(|e| format!("undecodable {what}: {e}"))
}

fn pairs_to(pairs: &[(String, String)]) -> Vec<pb::ConfigEntry> {
    pairs.iter().map(|(key, value)| pb::ConfigEntry { key: key.clone(), value: value.clone() }).collect()
}

fn pairs_from(entries: Vec<pb::ConfigEntry>) -> Vec<(String, String)> {
    entries.into_iter().map(|e| (e.key, e.value)).collect()
}

fn nodes_to(nodes: &[NodeInfo]) -> Vec<pb::Node> {
    nodes.iter().map(node_to).collect()
}

fn nodes_from(nodes: Vec<pb::Node>) -> Vec<NodeInfo> {
    nodes
        .into_iter()
        .map(|n| NodeInfo { id: n.id, addr: n.addr, internal_addr: n.internal_addr, kafka_addr: n.kafka_addr })
        .collect()
}

fn node_to(n: &NodeInfo) -> pb::Node {
    pb::Node {
        id: n.id,
        addr: n.addr.clone(),
        internal_addr: n.internal_addr.clone(),
        kafka_addr: n.kafka_addr.clone(),
    }
}

fn topic_id_from(bytes: &[u8]) -> Result<TopicId, String> {
    bytes.try_into().map_err(|_| format!("a topic id has 16 bytes, not {}", bytes.len()))
}

fn kind_of(k: PartitionKind) -> i32 {
    (match k {
        PartitionKind::Records => pb::PartitionKind::Records,
        PartitionKind::ConsumerOffsets => pb::PartitionKind::ConsumerOffsets,
        PartitionKind::TransactionState => pb::PartitionKind::TransactionState,
    }) as i32
}

fn kind_from_raw(raw: i32) -> Result<PartitionKind, String> {
    match pb::PartitionKind::try_from(raw) {
        Ok(pb::PartitionKind::Records) => Ok(PartitionKind::Records),
        Ok(pb::PartitionKind::ConsumerOffsets) => Ok(PartitionKind::ConsumerOffsets),
        Ok(pb::PartitionKind::TransactionState) => Ok(PartitionKind::TransactionState),
        Err(_) => Err(format!("unknown partition kind {raw} (written by a newer release?)")),
    }
}

fn config_to(c: &TopicConfig) -> pb::TopicConfig {
    pb::TopicConfig {
        min_insync_replicas: Some(c.min_insync_replicas),
        max_message_bytes: Some(c.max_message_bytes),
        replica_lag_time_max_ms: Some(c.replica_lag_time_max_ms),
        producer_id_expiration_ms: Some(c.producer_id_expiration_ms),
        retention_ms: Some(c.retention_ms),
        retention_bytes: Some(c.retention_bytes),
        cleanup_policy: Some(c.cleanup_policy.as_str().to_string()),
        delete_retention_ms: Some(c.delete_retention_ms),
        min_compaction_lag_ms: Some(c.min_compaction_lag_ms),
    }
}

/// Settings missing from the stored form (written before they existed) take their defaults,
/// except retention: a topic stored before retention existed kept everything, and keeps doing
/// so until an operator sets a limit (an upgrade must not delete data).
fn config_from(p: Option<pb::TopicConfig>, replication_factor: u32) -> Result<TopicConfig, String> {
    let d = TopicConfig::defaults(replication_factor);
    let p = p.unwrap_or_default();
    let cleanup_policy = match p.cleanup_policy.as_deref() {
        None => d.cleanup_policy,
        Some(v) => crate::config::CleanupPolicy::parse(v)
            .map_err(|e| format!("stored topic config: {} (written by a newer release?)", e.message))?,
    };
    Ok(TopicConfig {
        min_insync_replicas: p.min_insync_replicas.unwrap_or(d.min_insync_replicas),
        max_message_bytes: p.max_message_bytes.unwrap_or(d.max_message_bytes),
        replica_lag_time_max_ms: p.replica_lag_time_max_ms.unwrap_or(d.replica_lag_time_max_ms),
        producer_id_expiration_ms: p.producer_id_expiration_ms.unwrap_or(d.producer_id_expiration_ms),
        retention_ms: p.retention_ms.unwrap_or(crate::config::UNLIMITED),
        retention_bytes: p.retention_bytes.unwrap_or(crate::config::UNLIMITED),
        cleanup_policy,
        delete_retention_ms: p.delete_retention_ms.unwrap_or(d.delete_retention_ms),
        min_compaction_lag_ms: p.min_compaction_lag_ms.unwrap_or(d.min_compaction_lag_ms),
    })
}

fn topic_to(t: &TopicMeta) -> pb::Topic {
    pb::Topic {
        id: t.id,
        topic_id: Bytes::copy_from_slice(&t.topic_id),
        name: t.name.clone(),
        replication_factor: t.replication_factor,
        partitions: t
            .partitions
            .iter()
            .map(|p| pb::PartitionAssignment { group: p.group, replicas: p.replicas.clone() })
            .collect(),
        config: Some(config_to(&t.config)),
        kind: kind_of(t.kind),
    }
}

fn topic_from(p: pb::Topic) -> Result<TopicMeta, String> {
    Ok(TopicMeta {
        id: p.id,
        kind: kind_from_raw(p.kind)?,
        topic_id: topic_id_from(&p.topic_id)?,
        config: config_from(p.config, p.replication_factor)?,
        name: p.name,
        replication_factor: p.replication_factor,
        partitions: p
            .partitions
            .into_iter()
            .map(|a| PartitionAssignment { group: a.group, replicas: a.replicas })
            .collect(),
    })
}

fn kind_to(k: MetaErrorKind) -> pb::MetaErrorKind {
    match k {
        MetaErrorKind::InvalidTopic => pb::MetaErrorKind::InvalidTopic,
        MetaErrorKind::TopicExists => pb::MetaErrorKind::TopicExists,
        MetaErrorKind::UnknownTopic => pb::MetaErrorKind::UnknownTopic,
        MetaErrorKind::InvalidPartitions => pb::MetaErrorKind::InvalidPartitions,
        MetaErrorKind::InvalidReplicationFactor => pb::MetaErrorKind::InvalidReplicationFactor,
        MetaErrorKind::InvalidConfig => pb::MetaErrorKind::InvalidConfig,
    }
}

fn kind_from(raw: i32) -> Result<MetaErrorKind, String> {
    Ok(match pb::MetaErrorKind::try_from(raw) {
        Ok(pb::MetaErrorKind::InvalidTopic) => MetaErrorKind::InvalidTopic,
        Ok(pb::MetaErrorKind::TopicExists) => MetaErrorKind::TopicExists,
        Ok(pb::MetaErrorKind::UnknownTopic) => MetaErrorKind::UnknownTopic,
        Ok(pb::MetaErrorKind::InvalidPartitions) => MetaErrorKind::InvalidPartitions,
        Ok(pb::MetaErrorKind::InvalidReplicationFactor) => MetaErrorKind::InvalidReplicationFactor,
        Ok(pb::MetaErrorKind::InvalidConfig) => MetaErrorKind::InvalidConfig,
        Ok(pb::MetaErrorKind::MetaErrorUnspecified) | Err(_) => return Err(format!("unknown refusal kind {raw}")),
    })
}

/// Encodes the whole state (group 0's snapshot).
pub fn encode_state(s: &MetaState) -> Bytes {
    pb::MetaState {
        nodes: s.nodes.values().map(node_to).collect(),
        topics: s.topics.values().map(topic_to).collect(),
        next_topic_id: s.next_topic_id,
        next_group_id: s.next_group_id,
        version: s.version,
        next_producer_id: s.next_producer_id,
        deleted_groups: s.deleted_groups.iter().copied().collect(),
        admitted_nodes: s.admitted.iter().copied().collect(),
        cluster_id: s.cluster_id.clone(),
        group_configs: s.group_configs.iter().map(|(group, entries)| group_config_to(group, entries)).collect(),
    }
    .encode_to_vec()
    .into()
}

/// Decodes what [`encode_state`] wrote.
pub fn decode_state(bytes: &[u8]) -> Result<MetaState, String> {
    let p: pb::MetaState = decode_pb(bytes, "metadata state")?;
    Ok(MetaState {
        nodes: nodes_from(p.nodes).into_iter().map(|n| (n.id, n)).collect(),
        topics: p.topics.into_iter().map(|t| topic_from(t).map(|t| (t.name.clone(), t))).collect::<Result<_, _>>()?,
        next_topic_id: p.next_topic_id,
        next_group_id: p.next_group_id,
        version: p.version,
        next_producer_id: p.next_producer_id,
        deleted_groups: p.deleted_groups.into_iter().collect(),
        admitted: p.admitted_nodes.into_iter().collect(),
        cluster_id: p.cluster_id,
        group_configs: p.group_configs.into_iter().map(group_config_from).collect(),
    })
}

fn group_config_to(group: &str, entries: &GroupConfigEntries) -> pb::GroupConfig {
    pb::GroupConfig {
        group: group.to_string(),
        entries: entries
            .iter()
            .map(|(key, value)| pb::ConfigEntry { key: key.clone(), value: value.clone() })
            .collect(),
    }
}

fn group_config_from(g: pb::GroupConfig) -> (String, GroupConfigEntries) {
    (g.group, g.entries.into_iter().map(|e| (e.key, e.value)).collect())
}

/// Encodes a command for proposing.
pub fn encode_command(cmd: &MetaCommand) -> Bytes {
    use pb::meta_command::Command as C;
    let command = match cmd {
        MetaCommand::RegisterNodes { nodes } => C::RegisterNodes(pb::RegisterNodes { nodes: nodes_to(nodes) }),
        MetaCommand::CreateTopic { name, topic_id, kind, partitions, replication_factor, configs, live_nodes } => {
            C::CreateTopic(pb::CreateTopic {
                kind: kind_of(*kind),
                name: name.clone(),
                topic_id: Bytes::copy_from_slice(topic_id),
                partitions: *partitions,
                replication_factor: *replication_factor,
                configs: pairs_to(configs),
                live_nodes: live_nodes.clone(),
            })
        }
        MetaCommand::DeleteTopic { name } => C::DeleteTopic(pb::DeleteTopic { name: name.clone() }),
        MetaCommand::AdmitNode { id, revoke } => C::AdmitNode(pb::AdmitNode { node_id: *id, revoke: *revoke }),
        MetaCommand::SetClusterId { cluster_id } => {
            C::SetClusterId(pb::SetClusterId { cluster_id: cluster_id.clone() })
        }
        MetaCommand::AlterTopicConfig { name, edits } => C::AlterTopicConfig(pb::AlterTopicConfig {
            name: name.clone(),
            set: pairs_to(&edits.set),
            reset: edits.reset.clone(),
            append: pairs_to(&edits.append),
            subtract: pairs_to(&edits.subtract),
        }),
        MetaCommand::AlterGroupConfig { group, set, reset } => {
            C::AlterGroupConfig(pb::AlterGroupConfig { group: group.clone(), set: pairs_to(set), reset: reset.clone() })
        }
        MetaCommand::AllocateProducerIds { count } => C::AllocateProducerIds(pb::AllocateProducerIds { count: *count }),
        MetaCommand::CreatePartitions { name, total, live_nodes } => C::CreatePartitions(pb::CreatePartitions {
            name: name.clone(),
            total: *total,
            live_nodes: live_nodes.clone(),
        }),
    };
    pb::MetaCommand { command: Some(command) }.encode_to_vec().into()
}

/// Decodes a command.
pub fn decode_command(bytes: &[u8]) -> Result<MetaCommand, String> {
    use pb::meta_command::Command as C;
    let p: pb::MetaCommand = decode_pb(bytes, "metadata command")?;
    Ok(match p.command.ok_or("metadata command without a kind (written by a newer release?)")? {
        C::RegisterNodes(c) => MetaCommand::RegisterNodes { nodes: nodes_from(c.nodes) },
        C::CreateTopic(c) => MetaCommand::CreateTopic {
            topic_id: topic_id_from(&c.topic_id)?,
            kind: kind_from_raw(c.kind)?,
            name: c.name,
            partitions: c.partitions,
            replication_factor: c.replication_factor,
            configs: pairs_from(c.configs),
            live_nodes: c.live_nodes,
        },
        C::DeleteTopic(c) => MetaCommand::DeleteTopic { name: c.name },
        C::AdmitNode(c) => MetaCommand::AdmitNode { id: c.node_id, revoke: c.revoke },
        C::SetClusterId(c) => MetaCommand::SetClusterId { cluster_id: c.cluster_id },
        C::AlterTopicConfig(c) => MetaCommand::AlterTopicConfig {
            name: c.name,
            edits: ConfigEdits {
                set: pairs_from(c.set),
                reset: c.reset,
                append: pairs_from(c.append),
                subtract: pairs_from(c.subtract),
            },
        },
        C::AlterGroupConfig(c) => {
            MetaCommand::AlterGroupConfig { group: c.group, set: pairs_from(c.set), reset: c.reset }
        }
        C::AllocateProducerIds(c) => MetaCommand::AllocateProducerIds { count: c.count },
        C::CreatePartitions(c) => {
            MetaCommand::CreatePartitions { name: c.name, total: c.total, live_nodes: c.live_nodes }
        }
    })
}

/// Encodes a result for the proposer.
pub fn encode_result(result: &MetaResult) -> Bytes {
    use pb::meta_result::Result as R;
    let r = match result {
        MetaResult::NodesRegistered => R::NodesRegistered(pb::Empty {}),
        MetaResult::AdmissionChanged => R::AdmissionChanged(pb::Empty {}),
        MetaResult::ClusterId(id) => R::ClusterId(id.clone()),
        MetaResult::GroupConfigUpdated { group, entries } => R::GroupConfigUpdated(group_config_to(group, entries)),
        MetaResult::TopicCreated(t) => R::TopicCreated(topic_to(t)),
        MetaResult::TopicDeleted(t) => R::TopicDeleted(topic_to(t)),
        MetaResult::TopicUpdated(t) => R::TopicUpdated(topic_to(t)),
        MetaResult::ProducerIds { first, count } => R::ProducerIds(pb::ProducerIds { first: *first, count: *count }),
        MetaResult::Refused(e) => {
            R::Refused(pb::MetaError { kind: kind_to(e.kind) as i32, message: e.message.clone() })
        }
    };
    pb::MetaResult { result: Some(r) }.encode_to_vec().into()
}

/// Decodes a result.
pub fn decode_result(bytes: &[u8]) -> Result<MetaResult, String> {
    use pb::meta_result::Result as R;
    let p: pb::MetaResult = decode_pb(bytes, "metadata result")?;
    Ok(match p.result.ok_or("metadata result without a kind")? {
        R::NodesRegistered(_) => MetaResult::NodesRegistered,
        R::AdmissionChanged(_) => MetaResult::AdmissionChanged,
        R::ClusterId(id) => MetaResult::ClusterId(id),
        R::GroupConfigUpdated(g) => {
            let (group, entries) = group_config_from(g);
            MetaResult::GroupConfigUpdated { group, entries }
        }
        R::TopicCreated(t) => MetaResult::TopicCreated(topic_from(t)?),
        R::TopicDeleted(t) => MetaResult::TopicDeleted(topic_from(t)?),
        R::TopicUpdated(t) => MetaResult::TopicUpdated(topic_from(t)?),
        R::ProducerIds(p) => MetaResult::ProducerIds { first: p.first, count: p.count },
        R::Refused(e) => MetaResult::Refused(MetaError::new(kind_from(e.kind)?, e.message)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic() -> TopicMeta {
        TopicMeta {
            id: 3,
            topic_id: [9; 16],
            name: "orders".into(),
            replication_factor: 3,
            partitions: vec![PartitionAssignment { group: 4, replicas: vec![2, 3, 1] }],
            config: TopicConfig::defaults(3),
            kind: PartitionKind::ConsumerOffsets,
        }
    }

    #[test]
    fn state_commands_and_results_round_trip() {
        let mut s = MetaState::default();
        s.nodes
            .insert(1, NodeInfo { id: 1, addr: "h:1".into(), internal_addr: "h:11".into(), kafka_addr: "h:9".into() });
        s.topics.insert("orders".into(), topic());
        s.next_topic_id = 4;
        s.next_group_id = 5;
        s.version = 17;
        s.next_producer_id = 2001;
        s.deleted_groups.insert(2);
        s.admitted.insert(9);
        s.cluster_id = "q1Sh-9_ISia_zwGINzRvyQ".into();
        s.group_configs.insert("jobs".into(), [("share.delivery.count.limit".to_string(), "3".to_string())].into());
        assert_eq!(decode_state(&encode_state(&s)).unwrap(), s);

        let commands = [
            MetaCommand::RegisterNodes {
                nodes: vec![NodeInfo {
                    id: 2,
                    addr: "h:2".into(),
                    internal_addr: String::new(),
                    kafka_addr: "h:92".into(),
                }],
            },
            MetaCommand::CreateTopic {
                name: "t".into(),
                topic_id: [1; 16],
                kind: PartitionKind::TransactionState,
                partitions: 3,
                replication_factor: 3,
                configs: vec![("min.insync.replicas".into(), "2".into())],
                live_nodes: vec![1, 2],
            },
            MetaCommand::DeleteTopic { name: "t".into() },
            MetaCommand::AlterTopicConfig {
                name: "t".into(),
                edits: ConfigEdits::new(vec![], vec!["max.message.bytes".into()]),
            },
            MetaCommand::AlterTopicConfig {
                name: "t".into(),
                edits: ConfigEdits {
                    append: vec![("cleanup.policy".into(), "compact".into())],
                    subtract: vec![("cleanup.policy".into(), "delete".into())],
                    ..ConfigEdits::default()
                },
            },
            MetaCommand::AllocateProducerIds { count: 1000 },
            MetaCommand::AdmitNode { id: 4, revoke: false },
            MetaCommand::AdmitNode { id: 5, revoke: true },
            MetaCommand::CreatePartitions { name: "t".into(), total: 6, live_nodes: vec![] },
            MetaCommand::SetClusterId { cluster_id: "q1Sh-9_ISia_zwGINzRvyQ".into() },
            MetaCommand::AlterGroupConfig {
                group: "jobs".into(),
                set: vec![("share.record.lock.duration.ms".into(), "500".into())],
                reset: vec!["share.delivery.count.limit".into()],
            },
        ];
        for c in commands {
            assert_eq!(decode_command(&encode_command(&c)).unwrap(), c);
        }
        let results = [
            MetaResult::NodesRegistered,
            MetaResult::AdmissionChanged,
            MetaResult::ClusterId("q1Sh-9_ISia_zwGINzRvyQ".into()),
            MetaResult::TopicCreated(topic()),
            MetaResult::TopicDeleted(topic()),
            MetaResult::TopicUpdated(topic()),
            MetaResult::ProducerIds { first: 1, count: 1000 },
            MetaResult::GroupConfigUpdated {
                group: "jobs".into(),
                entries: [("share.auto.offset.reset".to_string(), "earliest".to_string())].into(),
            },
            MetaResult::Refused(MetaError::new(MetaErrorKind::TopicExists, "exists")),
        ];
        for r in results {
            assert_eq!(decode_result(&encode_result(&r)).unwrap(), r);
        }
    }

    #[test]
    fn settings_missing_from_older_data_take_their_defaults() {
        let mut t = topic_to(&topic());
        t.config = Some(pb::TopicConfig { min_insync_replicas: Some(3), ..Default::default() });
        let back = topic_from(t).unwrap();
        assert_eq!(back.config.min_insync_replicas, 3);
        assert_eq!(back.config.max_message_bytes, TopicConfig::defaults(3).max_message_bytes);
        // Retention did not exist: such a topic keeps everything rather than 7 days.
        assert_eq!((back.config.retention(), back.config.retention_bytes()), (None, None));
        assert!(TopicConfig::defaults(3).retention().is_some(), "new topics get the default");
        assert!(!back.config.compacted(), "compaction did not exist: such a topic is not compacted");
    }

    #[test]
    fn a_compacted_topics_settings_round_trip_and_an_unknown_policy_is_refused() {
        let mut t = topic();
        t.config = TopicConfig::from_entries(
            3,
            &[("cleanup.policy".into(), "compact".into()), ("min.compaction.lag.ms".into(), "5".into())],
        )
        .unwrap();
        assert_eq!(topic_from(topic_to(&t)).unwrap(), t);
        let mut stored = topic_to(&t);
        if let Some(c) = stored.config.as_mut() {
            c.cleanup_policy = Some("tiered".into());
        }
        let e = topic_from(stored).unwrap_err();
        assert!(e.contains("cleanup.policy"), "{e}");
    }

    #[test]
    fn garbage_is_refused() {
        assert!(decode_state(b"\xff\xff").is_err());
        assert!(decode_command(b"").is_err(), "no command kind");
        assert!(decode_result(b"\x0a").is_err());
        let mut bad = topic_to(&topic());
        bad.topic_id = Bytes::from_static(b"short");
        assert!(topic_from(bad).is_err());
    }
}

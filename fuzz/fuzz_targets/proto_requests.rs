//! Every public request (`rill.records`, `rill.admin`, `rill.groups`, `rill.transactions`,
//! `rill.share`)
//! decoded from arbitrary bytes, then put through the checks the service layer runs on it before
//! any work — the node's own functions (`rill_server::service::checks`), never copies: batch
//! validation under the topic's `max.message.bytes` and the transactional part (Produce), the
//! metadata's create / alter / grow / delete checks against a small cluster, group and
//! transactional id checks, the coordinator partition an id hashes to, a commit's offsets checked
//! against the cluster's metadata and applied to a `__consumer_offsets` machine, and the
//! transaction coordinator's decisions for `AddPartitionsToTxn` and `EndTxn` — each written to a
//! `__transaction_state` machine, which must apply it; a share request's acknowledgement ranges
//! expanded (refused before they are allocated when out of bounds), and a share group's settings
//! checked and applied to the metadata.
//!
//! Input: the bytes, decoded as every request type.
//!
//! Properties: no panic; what the metadata's checks accept, the metadata state machine applies
//! with the same outcome (the leader checks again when applying: the two must agree); the heap
//! a decode holds is a small multiple of its input.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use rill_coordinator::{hash, offsets, transactions, OffsetsMachine};
use rill_fuzz::{base_cluster, peak_during, Counting};
use rill_meta::config::DEFAULT_MAX_MESSAGE_BYTES;
use rill_meta::{MetaCommand, MetaResult, PartitionKind};
use rill_proto::coordinator as cpb;
use rill_proto::{admin, groups, records, share as spb, transactions as tpb};
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};
use rill_records::{BatchInfo, MAX_DECOMPRESSED_BATCH_BYTES};
use rill_server::service::checks;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap a decode may hold per input byte: a repeated element (a topic, a partition entry) as
/// prost's struct, for as little as two bytes on the wire.
const BYTES_PER_INPUT_BYTE: usize = 256;
/// Fixed overhead.
const SLACK_BYTES: usize = 16 << 10;
/// The live nodes of the small cluster.
const LIVE: [u64; 3] = [1, 2, 3];

fn decoded<M: Message + Default>(data: &[u8]) -> Option<M> {
    let (m, peak) = peak_during(|| M::decode(data));
    assert!(
        peak <= BYTES_PER_INPUT_BYTE * data.len() + SLACK_BYTES,
        "{} held {peak} bytes decoding {} bytes",
        std::any::type_name::<M>(),
        data.len()
    );
    m.ok()
}

fn pairs(entries: Vec<admin::TopicConfigEntry>) -> Vec<(String, String)> {
    entries.into_iter().map(|c| (c.key, c.value)).collect()
}

fn produce(req: records::ProduceRequest) {
    let _ = records::Acks::try_from(req.acks);
    let _ = checks::transactional(&req.transactional_id, req.transaction_version);
    let bound = (DEFAULT_MAX_MESSAGE_BYTES as usize).min(MAX_DECOMPRESSED_BATCH_BYTES);
    for p in req.topics.iter().flat_map(|t| &t.partitions) {
        let _ = BatchInfo::parse(&p.batch);
        if p.batch.len() <= DEFAULT_MAX_MESSAGE_BYTES as usize {
            let _ = rill_records::validate(&p.batch, bound);
        }
    }
}

fn create_topic(req: admin::CreateTopicRequest) {
    let mut state = base_cluster();
    let configs = pairs(req.configs);
    let (partitions, checked) =
        (req.partitions, state.check_create(&req.name, req.partitions, req.replication_factor, &configs, &LIVE));
    let result = state.apply(MetaCommand::CreateTopic {
        name: req.name,
        topic_id: [0xee; 16],
        kind: PartitionKind::Records,
        partitions: req.partitions,
        replication_factor: req.replication_factor,
        configs,
        live_nodes: LIVE.to_vec(),
    });
    match (checked, result) {
        (Ok(config), MetaResult::TopicCreated(t)) => {
            assert_eq!(t.config, config);
            assert_eq!(t.partitions.len(), partitions as usize);
            assert!(t.partitions.iter().all(|p| p.replicas.len() == t.replication_factor as usize));
        }
        (Err(e), MetaResult::Refused(r)) => assert_eq!(e, r),
        (checked, result) => panic!("check_create said {checked:?}, applying said {result:?}"),
    }
}

fn alter_config(req: admin::AlterTopicConfigRequest) {
    let mut state = base_cluster();
    let edits = rill_meta::ConfigEdits::new(pairs(req.set), req.reset);
    let checked = state.check_alter_config(&req.name, &edits);
    match (checked, state.apply(MetaCommand::AlterTopicConfig { name: req.name, edits })) {
        (Ok(config), MetaResult::TopicUpdated(t)) => assert_eq!(t.config, config),
        (Err(e), MetaResult::Refused(r)) => assert_eq!(e, r),
        (checked, result) => panic!("check_alter_config said {checked:?}, applying said {result:?}"),
    }
}

fn create_partitions(req: admin::CreatePartitionsRequest) {
    let mut state = base_cluster();
    let checked =
        state.check_create_partitions(&req.name, req.total, &LIVE).map(|t| t.partitions.len()).map_err(|e| e.clone());
    let cmd = MetaCommand::CreatePartitions { name: req.name, total: req.total, live_nodes: LIVE.to_vec() };
    match (checked, state.apply(cmd)) {
        (Ok(_), MetaResult::TopicUpdated(t)) => assert_eq!(t.partitions.len(), req.total as usize),
        (Err(e), MetaResult::Refused(r)) => assert_eq!(e, r),
        (checked, result) => panic!("check_create_partitions said {checked:?}, applying said {result:?}"),
    }
}

fn delete_topic(req: admin::DeleteTopicRequest) {
    let mut state = base_cluster();
    let checked = state.check_delete(&req.name);
    match (checked, state.apply(MetaCommand::DeleteTopic { name: req.name })) {
        (Ok(()), MetaResult::TopicDeleted(_)) => {}
        (Err(e), MetaResult::Refused(r)) => assert_eq!(e, r),
        (checked, result) => panic!("check_delete said {checked:?}, applying said {result:?}"),
    }
}

fn find_coordinator(req: admin::FindCoordinatorRequest) {
    let kind = match admin::CoordinatorKind::try_from(req.kind) {
        Ok(admin::CoordinatorKind::Group) => PartitionKind::ConsumerOffsets,
        _ => PartitionKind::TransactionState,
    };
    if checks::coordinator_key(kind, &req.key).is_ok() {
        assert!(hash::partition_for(&req.key, 16) < 16);
    }
}

/// The offsets of a commit request the service layer accepts against the small cluster's
/// metadata ([`checks::committed_offsets`], at most a commit's worth), as the coordinator stores
/// them.
fn acceptable_offsets(topics: &[groups::CommitTopic]) -> Vec<cpb::CommittedOffset> {
    let topics = topics
        .iter()
        .map(|t| checks::CommitTopic {
            topic: t.topic.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| checks::CommitPartition {
                    partition: p.partition,
                    offset: p.offset,
                    metadata: p.metadata.clone(),
                    leader_epoch: None,
                })
                .collect(),
        })
        .collect();
    let (accepted, answers) = checks::committed_offsets(&base_cluster(), topics, |_| None);
    let refused = answers.iter().flat_map(|t| &t.partitions).filter(|(_, a)| a.is_err()).count();
    assert_eq!(accepted.len() + refused, answers.iter().map(|t| t.partitions.len()).sum::<usize>());
    accepted
        .into_iter()
        .take(offsets::MAX_OFFSETS_PER_COMMIT)
        .map(|o| cpb::CommittedOffset {
            topic: o.topic,
            topic_id: Bytes::copy_from_slice(&o.topic_id),
            partition: o.partition,
            offset: o.offset,
            metadata: o.metadata,
            commit_time_ms: 1,
            leader_epoch: o.leader_epoch,
        })
        .collect()
}

/// The offsets of a commit, as the coordinator proposes them once they passed the per-entry
/// checks, applied to a `__consumer_offsets` machine.
fn commit_offsets(req: groups::CommitOffsetsRequest) {
    if checks::coordinator_key(PartitionKind::ConsumerOffsets, &req.group_id).is_err() {
        return;
    }
    let offsets = acceptable_offsets(&req.topics);
    let expected: Vec<_> = offsets.iter().map(|o| (o.topic.clone(), o.partition)).collect();
    let command = cpb::OffsetsCommand {
        command: Some(cpb::offsets_command::Command::Commit(cpb::CommitOffsets {
            group_id: req.group_id.clone(),
            offsets,
            member_id: String::new(),
            member_epoch: -1,
        })),
    };
    let mut m = OffsetsMachine::new();
    let log_id = LogId::new(openraft::CommittedLeaderId::new(1, 1), 1);
    m.apply(&log_id, 0, &Payload { units: 1, body: command.encode_to_vec().into(), proposal: 0 });
    for (topic, partition) in expected {
        assert!(m.state().committed(&req.group_id, &topic, partition).is_some(), "a commit is readable");
    }
}

/// A transactional offset commit as the group coordinator applies it: pending, invisible as a
/// committed offset, then committed by the transaction's marker.
fn txn_commit_offsets(req: groups::TxnCommitOffsetsRequest) {
    if checks::coordinator_key(PartitionKind::ConsumerOffsets, &req.group_id).is_err()
        || checks::producer_epoch(req.producer_epoch).is_err()
    {
        return;
    }
    let offsets = acceptable_offsets(&req.topics);
    let expected: Vec<_> = offsets.iter().map(|o| (o.topic.clone(), o.partition)).collect();
    let apply = |m: &mut OffsetsMachine, index: u64, c: cpb::offsets_command::Command| {
        let log_id = LogId::new(openraft::CommittedLeaderId::new(1, 1), index);
        let body = cpb::OffsetsCommand { command: Some(c) }.encode_to_vec().into();
        m.apply(&log_id, 0, &Payload { units: 1, body, proposal: 0 })
    };
    let mut m = OffsetsMachine::new();
    let commit =
        cpb::CommitOffsets { group_id: req.group_id.clone(), offsets, member_id: String::new(), member_epoch: -1 };
    let pending = cpb::TxnCommitOffsets {
        commit: Some(commit),
        classic: false,
        producer_id: req.producer_id,
        producer_epoch: req.producer_epoch,
        transaction_start: 1,
        owed_marker: None,
    };
    apply(&mut m, 1, cpb::offsets_command::Command::TxnCommit(pending));
    for (topic, partition) in &expected {
        assert!(m.state().txn().is_pending(&req.group_id, topic, *partition), "pending until the marker");
        assert!(m.state().committed(&req.group_id, topic, *partition).is_none(), "not committed yet");
    }
    let marker = cpb::TxnOffsetsMarker {
        producer_id: req.producer_id,
        producer_epoch: req.producer_epoch,
        coordinator_epoch: 1,
        commit: true,
        transaction_start: 1,
        written_ms: 1,
    };
    apply(&mut m, 2, cpb::offsets_command::Command::TxnMarker(marker));
    for (topic, partition) in &expected {
        assert!(m.state().committed(&req.group_id, topic, *partition).is_some(), "committed by the marker");
        assert!(!m.state().txn().is_pending(&req.group_id, topic, *partition));
    }
}

/// A consumer group heartbeat as the coordinator decides it: against no group, then (when it
/// changed something) once more against the group it made, every change applied to a machine's
/// group state as a replica would.
fn consumer_group_heartbeat(r: groups::ConsumerGroupHeartbeatRequest) {
    use rill_coordinator::groups::{self as cg, group::ConsumerGroups};
    let owned = r.owned.as_ref().map(|o| {
        let mut set = cg::TopicPartitions::new();
        for t in o.topics.iter().take(64) {
            set.entry(t.topic.clone()).or_default().extend(t.partitions.iter().take(64).copied());
        }
        set
    });
    let req = cg::HeartbeatRequest {
        group_id: r.group_id,
        member_id: r.member_id,
        member_epoch: r.member_epoch,
        instance_id: r.instance_id,
        rack_id: r.rack_id,
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        subscribed_topics: r.subscribed_topics.map(|s| s.topics),
        subscribed_regex: r.subscribed_topic_regex,
        server_assignor: r.server_assignor,
        rebalance_mode: r.rebalance_mode,
        owned,
        client_id: r.client_id,
        client_host: "127.0.0.1".into(),
    };
    let topics = EveryTopic;
    let mut groups = ConsumerGroups::default();
    let mut id = || "member-1".to_string();
    for _ in 0..2 {
        let Ok(d) =
            cg::heartbeat::heartbeat(groups.get(&req.group_id), &req, &topics, cg::Timeouts::default(), 1, &mut id)
        else {
            return;
        };
        let Some(change) = d.change else { return };
        assert_eq!(
            groups.apply(&change),
            cg::group::Applied::Changed,
            "a change decided from the applied state applies"
        );
    }
}

/// Every topic named exists with a few partitions; a pattern matches among a fixed few.
struct EveryTopic;

impl rill_coordinator::groups::TopicSource for EveryTopic {
    fn topic(&self, name: &str) -> Option<rill_coordinator::groups::SubscribedTopic> {
        Some(rill_coordinator::groups::SubscribedTopic { topic_id: [1; 16], partitions: (name.len() % 7) as u32 })
    }

    fn matching(
        &self,
        pattern: &rill_coordinator::groups::TopicPattern,
    ) -> Vec<(String, rill_coordinator::groups::SubscribedTopic)> {
        ["a", "orders", "orders-eu", "payments"]
            .into_iter()
            .filter(|name| pattern.matches(name))
            .filter_map(|name| Some((name.to_string(), self.topic(name)?)))
            .collect()
    }
}

/// A `__transaction_state` machine holding `id` at producer 7, epoch 0 (as `InitProducerId`
/// leaves it), and that record.
fn initialised(id: &str) -> (rill_coordinator::TransactionsMachine, rill_coordinator::TransactionMetadata) {
    let mut m = rill_coordinator::TransactionsMachine::new();
    let Ok(transactions::transitions::InitDecision::Write(record)) =
        transactions::transitions::init_producer(id, None, 60_000, None, Some(7), 1)
    else {
        unreachable!("a new id with a fresh producer id is written");
    };
    assert!(write_txn(&mut m, id, &record, 0), "a new id's record applies");
    let stored = m.state().get(id).cloned().unwrap_or(record);
    (m, stored)
}

/// Applies a `WriteTransaction` of `record` over `expect_version`; true when it took effect.
fn write_txn(
    m: &mut rill_coordinator::TransactionsMachine,
    id: &str,
    record: &rill_coordinator::TransactionMetadata,
    expect_version: u64,
) -> bool {
    let body = cpb::TransactionsCommand {
        command: Some(cpb::transactions_command::Command::WriteTransaction(cpb::WriteTransaction {
            txn: Some(record.to_proto(id)),
            expect_version,
            markers_term: 0,
        })),
    };
    let answer = m.apply(&LogId::default(), 0, &Payload { units: 0, body: body.encode_to_vec().into(), proposal: 0 });
    transactions::took_effect(&answer)
}

/// `AddPartitionsToTxn`, then `EndTxn` of what it began: every decision made from the applied
/// record applies.
fn add_partitions_then_end(req: tpb::AddPartitionsToTxnRequest) {
    if checks::coordinator_key(PartitionKind::TransactionState, &req.transactional_id).is_err() {
        return;
    }
    let Ok(epoch) = checks::producer_epoch(req.producer_epoch) else { return };
    let named: Vec<checks::NamedPartitions> = req
        .topics
        .iter()
        .take(64)
        .map(|t| checks::NamedPartitions {
            topic: t.topic.clone(),
            partitions: t.partitions.iter().take(64).copied().collect(),
        })
        .collect();
    // The service layer's check against the small cluster: only its record topic's partitions.
    let Ok(parts) = checks::txn_partitions(&base_cluster(), &named) else { return };
    let id = req.transactional_id.as_str();
    let (mut m, record) = initialised(id);
    let producer = (req.producer_id, epoch);
    let protocol = transactions::TxnProtocol::V2;
    let Ok(added) =
        transactions::transitions::add_to_transaction(id, Some(&record), producer, &parts, &[], protocol, 2)
    else {
        return;
    };
    let Some(added) = added else { return };
    assert!(write_txn(&mut m, id, &added, record.version), "an add decided from the applied record applies");
    let Some(current) = m.state().get(id).cloned() else { return };
    if let Ok(
        transactions::transitions::EndDecision::Prepare(p) | transactions::transitions::EndDecision::Complete(p),
    ) = transactions::transitions::end_transaction(id, Some(&current), producer, true, protocol, Some(8), 3)
    {
        assert!(write_txn(&mut m, id, &p, current.version), "an end decided from the applied record applies");
    }
}

/// A share request's topics: the listener's translation, then the service's expansion of each
/// partition's acknowledgement ranges, whose memory must stay in proportion to the input (a range
/// of 2^64 records is refused before anything is allocated for it).
fn share_topics(topics: Vec<spb::ShareFetchTopic>, input_len: usize) {
    use rill_server::service::share::{self, MAX_ACKS_PER_REQUEST, MAX_REASON_BYTES_PER_REQUEST};
    let Ok(topics) = rill_server::api::share::topics(topics) else { return };
    if share::check_ack_budget(&topics).is_err() {
        return;
    }
    // Whatever the request, what its acknowledgements expand to is bounded per request.
    let per_ack = std::mem::size_of::<(u64, rill_broker::share::Ack)>() + std::mem::size_of::<u64>();
    let bound = 2 * per_ack * MAX_ACKS_PER_REQUEST as usize
        + MAX_REASON_BYTES_PER_REQUEST as usize
        + BYTES_PER_INPUT_BYTE * input_len
        + SLACK_BYTES;
    let (expanded, peak) = peak_during(|| {
        topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| share::expand_acks(&p.acks).map(|a| a.len()))
            .collect::<Vec<_>>()
    });
    let total: usize = expanded.iter().filter_map(|e| e.as_ref().ok()).sum();
    assert!(total as u64 <= MAX_ACKS_PER_REQUEST);
    assert!(peak <= bound, "{peak} bytes expanding {total} acknowledgements");
}

/// A share group's settings: what the metadata's check accepts, applying accepts alike.
fn alter_share_group_config(req: spb::AlterShareGroupConfigRequest) {
    let mut state = base_cluster();
    let set: Vec<(String, String)> = req.set.into_iter().map(|s| (s.key, s.value)).collect();
    let checked = state.check_alter_group_config(&req.group_id, &set, &req.reset);
    let cmd = MetaCommand::AlterGroupConfig { group: req.group_id, set, reset: req.reset };
    match (checked, state.apply(cmd)) {
        (Ok(entries), MetaResult::GroupConfigUpdated { entries: applied, .. }) => assert_eq!(entries, applied),
        (Err(e), MetaResult::Refused(r)) => assert_eq!(e, r),
        (checked, result) => panic!("check_alter_group_config said {checked:?}, applying said {result:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(r) = decoded::<spb::ShareFetchRequest>(data) {
        share_topics(r.topics, data.len());
    }
    if let Some(r) = decoded::<spb::ShareAcknowledgeRequest>(data) {
        share_topics(r.topics, data.len());
    }
    if let Some(r) = decoded::<spb::AlterShareGroupConfigRequest>(data) {
        alter_share_group_config(r);
    }
    if let Some(r) = decoded::<spb::DescribeShareGroupRequest>(data) {
        // What the service checks before it reads any partition's state.
        let _ = rill_meta::group_config::check_group_id(&r.group_id);
    }
    if let Some(r) = decoded::<groups::ConsumerGroupHeartbeatRequest>(data) {
        consumer_group_heartbeat(r);
    }
    if let Some(r) = decoded::<records::ProduceRequest>(data) {
        produce(r);
    }
    if let Some(r) = decoded::<records::FetchRequest>(data) {
        let _ = r.topics.iter().map(|t| t.partitions.len()).sum::<usize>();
    }
    if let Some(r) = decoded::<records::ListOffsetsRequest>(data) {
        let _ = records::OffsetSpec::try_from(r.spec);
    }
    if let Some(r) = decoded::<records::InitProducerIdRequest>(data) {
        if !r.transactional_id.is_empty() {
            let _ = transactions::validate(&r.transactional_id, r.transaction_timeout_ms);
        }
    }
    if let Some(r) = decoded::<admin::CreateTopicRequest>(data) {
        create_topic(r);
    }
    if let Some(r) = decoded::<admin::AlterTopicConfigRequest>(data) {
        alter_config(r);
    }
    if let Some(r) = decoded::<admin::CreatePartitionsRequest>(data) {
        create_partitions(r);
    }
    if let Some(r) = decoded::<admin::DeleteTopicRequest>(data) {
        delete_topic(r);
    }
    if let Some(r) = decoded::<admin::FindCoordinatorRequest>(data) {
        find_coordinator(r);
    }
    if let Some(r) = decoded::<admin::MetadataRequest>(data) {
        for name in r.topics.iter().take(16) {
            let _ = rill_meta::state::validate_topic_name(name);
        }
    }
    let _ = decoded::<admin::ListTopicsRequest>(data);
    let _ = decoded::<admin::DescribeTopicRequest>(data);
    let _ = decoded::<admin::DescribeClusterRequest>(data);
    if let Some(r) = decoded::<groups::CommitOffsetsRequest>(data) {
        commit_offsets(r);
    }
    if let Some(r) = decoded::<groups::FetchOffsetsRequest>(data) {
        let _ = checks::coordinator_key(PartitionKind::ConsumerOffsets, &r.group_id);
    }
    if let Some(r) = decoded::<groups::TxnCommitOffsetsRequest>(data) {
        txn_commit_offsets(r);
    }
    if let Some(r) = decoded::<tpb::AddOffsetsToTxnRequest>(data) {
        if checks::coordinator_key(PartitionKind::TransactionState, &r.transactional_id).is_ok()
            && checks::coordinator_key(PartitionKind::ConsumerOffsets, &r.group_id).is_ok()
        {
            if let Ok(epoch) = checks::producer_epoch(r.producer_epoch) {
                let (_, record) = initialised(&r.transactional_id);
                let none = rill_coordinator::groups::TopicPartitions::new();
                let groups = [r.group_id.clone()];
                let producer = (r.producer_id, epoch);
                let protocol = transactions::TxnProtocol::V1;
                let added = transactions::transitions::add_to_transaction(
                    &r.transactional_id,
                    Some(&record),
                    producer,
                    &none,
                    &groups,
                    protocol,
                    2,
                );
                if let Ok(Some(next)) = added {
                    assert!(next.groups.contains(&r.group_id), "the group joined the transaction");
                }
            }
        }
    }
    if let Some(r) = decoded::<tpb::AddPartitionsToTxnRequest>(data) {
        add_partitions_then_end(r);
    }
    if let Some(r) = decoded::<tpb::EndTxnRequest>(data) {
        if checks::coordinator_key(PartitionKind::TransactionState, &r.transactional_id).is_ok() {
            if let (Ok(epoch), Ok(protocol)) =
                (checks::producer_epoch(r.producer_epoch), checks::txn_protocol(r.transaction_version))
            {
                let (_, record) = initialised(&r.transactional_id);
                let producer = (r.producer_id, epoch);
                let _ = transactions::transitions::end_transaction(
                    &r.transactional_id,
                    Some(&record),
                    producer,
                    r.commit,
                    protocol,
                    Some(8),
                    3,
                );
            }
        }
    }
    for id in decoded::<tpb::DescribeTransactionsRequest>(data)
        .map(|r| r.transactional_ids)
        .unwrap_or_default()
        .iter()
        .take(16)
    {
        let _ = transactions::validate(id, 0);
    }
    let _ = decoded::<tpb::ListTransactionsRequest>(data);
    let _ = decoded::<tpb::AbortTransactionRequest>(data);
});

//! The consumer-group APIs of Kafka's classic protocol: `FindCoordinator`, `JoinGroup`,
//! `SyncGroup`, `Heartbeat`, `LeaveGroup`, `OffsetCommit`, `OffsetFetch`, the listings
//! `ListGroups` and `DescribeGroups`, and the deletions `DeleteGroups` and `OffsetDelete`. Each is one call of
//! the service function the gRPC handler calls: the classic engine of the group's coordinator
//! shard decides membership, the `__consumer_offsets` partition keeps the commits. A group is
//! the same group whichever listener its members use.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as KafkaCoordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rill_coordinator::groups::classic::{Heartbeat, JoinGroup, LeaveGroup, Leaving, Protocol, SyncGroup};
use rill_coordinator::offsets::CommittedOffset;
use rill_meta::PartitionKind;
use rill_proto::common::ErrorCode;

use super::cluster::{broker_id, host_port, topic_name};
use super::errors;
use super::wire::{known_epoch, non_negative, partition_index, str_bytes, text};
use crate::errors::{kafka_code, Refusal};
use crate::service::checks::{CommitPartition, CommitTopic, NamedPartitions};
use crate::service::classic::JoinOutcome;
use crate::service::{Answer, Answers, RequestContext, Service, TopicAnswers};

/// `FindCoordinator`, versions 0 to 4: the node leading the key's `__consumer_offsets` (key type
/// 0, a group) or `__transaction_state` (1, a transactional id) partition, at its Kafka address.
/// From version 4 many keys at once, each answered on its own.
pub fn find_coordinator(
    service: &Service,
    ctx: &RequestContext,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let kind = match request.key_type {
        0 => Some(PartitionKind::ConsumerOffsets),
        1 => Some(PartitionKind::TransactionState),
        _ => None,
    };
    let find = |key: &StrBytes| -> KafkaCoordinator {
        let answer = match kind {
            Some(kind) => service.find_coordinator(ctx, kind, key).and_then(|c| {
                let (host, port) = host_port(&c.address).ok_or_else(|| {
                    Refusal::new(ErrorCode::CoordinatorNotAvailable, format!("{} has no Kafka address", c.node_id))
                })?;
                let node_id = broker_id(c.node_id).ok_or_else(|| {
                    Refusal::new(
                        ErrorCode::CoordinatorNotAvailable,
                        format!("node {} has no Kafka broker id", c.node_id),
                    )
                })?;
                Ok((node_id, host, port))
            }),
            None => Err(Refusal::new(
                ErrorCode::InvalidRequest,
                format!("unknown coordinator key type {}: 0 is a group, 1 a transactional id", request.key_type),
            )),
        };
        let coordinator = KafkaCoordinator::default().with_key(key.clone());
        match answer {
            Ok((node_id, host, port)) => coordinator.with_node_id(node_id).with_host(str_bytes(host)).with_port(port),
            Err(refusal) => coordinator
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(errors::code(&refusal))
                .with_error_message(Some(str_bytes(refusal.message))),
        }
    };
    if version >= 4 {
        return FindCoordinatorResponse::default()
            .with_coordinators(request.coordinator_keys.iter().map(find).collect());
    }
    let found = find(&request.key);
    FindCoordinatorResponse::default()
        .with_error_code(found.error_code)
        .with_error_message(found.error_message)
        .with_node_id(found.node_id)
        .with_host(found.host)
        .with_port(found.port)
}

/// `JoinGroup`, versions 0 to 9: answered once the join phase completes (the connection's next
/// request waits, as on Kafka's brokers). From version 4 a new member is first given its id with
/// `MEMBER_ID_REQUIRED` (KIP-394); version 0 has no rebalance timeout (the session timeout
/// stands in, as in Kafka).
pub async fn join_group(
    service: &Service,
    ctx: &RequestContext,
    request: JoinGroupRequest,
    version: i16,
) -> JoinGroupResponse {
    let member_id = text(&request.member_id);
    let rebalance_timeout_ms = if version == 0 { request.session_timeout_ms } else { request.rebalance_timeout_ms };
    let join = JoinGroup {
        group_id: request.group_id.0.to_string(),
        member_id: member_id.clone(),
        instance_id: request.group_instance_id.as_ref().map(text),
        protocol_type: text(&request.protocol_type),
        protocols: request
            .protocols
            .into_iter()
            .map(|p| Protocol { name: text(&p.name), metadata: p.metadata })
            .collect(),
        session_timeout_ms: non_negative(request.session_timeout_ms),
        rebalance_timeout_ms: non_negative(rebalance_timeout_ms),
        client_id: String::new(),
        client_host: String::new(),
        legacy_member_id: version < 4,
    };
    let refused = |refusal: &Refusal, member_id: String| {
        JoinGroupResponse::default()
            .with_error_code(errors::code(refusal))
            .with_generation_id(-1)
            .with_member_id(str_bytes(member_id))
    };
    match service.join_group(ctx, join).await {
        Ok(JoinOutcome::Joined(joined)) => JoinGroupResponse::default()
            .with_generation_id(joined.generation)
            .with_protocol_type(Some(str_bytes(joined.protocol_type)))
            .with_protocol_name(Some(str_bytes(joined.protocol_name)))
            .with_leader(str_bytes(joined.leader))
            // Only v9 carries it (a static leader rejoining told not to assign).
            .with_skip_assignment(joined.skip_assignment && version >= 9)
            .with_member_id(str_bytes(joined.member_id))
            .with_members(
                joined
                    .members
                    .into_iter()
                    .map(|m| {
                        JoinGroupResponseMember::default()
                            .with_member_id(str_bytes(m.member_id))
                            .with_group_instance_id(m.instance_id.map(str_bytes))
                            .with_metadata(m.metadata)
                    })
                    .collect(),
            ),
        Ok(JoinOutcome::MemberIdRequired { member_id, refusal }) => refused(&refusal, member_id),
        Err(refusal) => refused(&refusal, member_id),
    }
}

/// `SyncGroup`, versions 0 to 5: the member's assignment for its generation, once the leader's
/// is stored.
pub async fn sync_group(service: &Service, ctx: &RequestContext, request: SyncGroupRequest) -> SyncGroupResponse {
    let sync = SyncGroup {
        group_id: request.group_id.0.to_string(),
        member_id: text(&request.member_id),
        instance_id: request.group_instance_id.as_ref().map(text),
        generation: request.generation_id,
        protocol_type: request.protocol_type.as_ref().map(text),
        protocol_name: request.protocol_name.as_ref().map(text),
        assignments: request.assignments.into_iter().map(|a| (text(&a.member_id), a.assignment)).collect(),
    };
    match service.sync_group(ctx, sync).await {
        Ok(synced) => SyncGroupResponse::default()
            .with_protocol_type(Some(str_bytes(synced.protocol_type)))
            .with_protocol_name(Some(str_bytes(synced.protocol_name)))
            .with_assignment(synced.assignment),
        Err(refusal) => SyncGroupResponse::default().with_error_code(errors::code(&refusal)),
    }
}

/// `Heartbeat`, versions 0 to 4: `REBALANCE_IN_PROGRESS` tells the member to join again.
pub fn heartbeat(service: &Service, ctx: &RequestContext, request: HeartbeatRequest) -> HeartbeatResponse {
    let beat = Heartbeat {
        group_id: request.group_id.0.to_string(),
        member_id: text(&request.member_id),
        instance_id: request.group_instance_id.as_ref().map(text),
        generation: request.generation_id,
    };
    let code = service.group_heartbeat(ctx, &beat).err().map_or(0, |refusal| errors::code(&refusal));
    HeartbeatResponse::default().with_error_code(code)
}

/// `LeaveGroup`, versions 0 to 5: one member (v0–2) or many (v3+), each answered on its own.
pub fn leave_group(
    service: &Service,
    ctx: &RequestContext,
    request: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let members = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| Leaving { member_id: text(&m.member_id), instance_id: m.group_instance_id.as_ref().map(text) })
            .collect()
    } else {
        vec![Leaving { member_id: text(&request.member_id), instance_id: None }]
    };
    let leave = LeaveGroup { group_id: request.group_id.0.to_string(), members };
    let left = match service.leave_group(ctx, &leave) {
        Ok(left) => left,
        Err(e) => return LeaveGroupResponse::default().with_error_code(errors::request_error(&e)),
    };
    match left {
        Err(refusal) => LeaveGroupResponse::default().with_error_code(errors::code(&refusal)),
        // v0–2 answer the one member at the top level.
        Ok(left) if version < 3 => {
            let code = left
                .first()
                .and_then(|l| l.result.as_ref().err())
                .map_or(0, |e| errors::code(&crate::errors::coordinator(e)));
            LeaveGroupResponse::default().with_error_code(code)
        }
        Ok(left) => LeaveGroupResponse::default().with_members(
            left.into_iter()
                .map(|l| {
                    let code = l.result.as_ref().err().map_or(0, |e| errors::code(&crate::errors::coordinator(e)));
                    MemberResponse::default()
                        .with_member_id(str_bytes(l.member.member_id))
                        .with_group_instance_id(l.member.instance_id.map(str_bytes))
                        .with_error_code(code)
                })
                .collect(),
        ),
    }
}

/// `OffsetCommit`, versions 2 to 9: each partition answered on its own. A classic member commits
/// under its generation; a group without members takes commits from anyone (generation -1).
/// The committed leader epoch (v6+) is kept with the offset and answered by `OffsetFetch`.
pub async fn offset_commit(
    service: &Service,
    ctx: &RequestContext,
    request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let (topics, names, indexes) = commit_topics(request.topics.into_iter().map(|t| {
        let partitions = t.partitions.into_iter().map(|p| WireCommit {
            index: p.partition_index,
            offset: p.committed_offset,
            metadata: p.committed_metadata,
            leader_epoch: p.committed_leader_epoch,
        });
        (t.name, partitions.collect())
    }));
    let group_id = request.group_id.0.to_string();
    let committed = service
        .commit_offsets(ctx, &group_id, &text(&request.member_id), request.generation_id_or_member_epoch, topics)
        .await;
    let topics = commit_answers(
        committed,
        names,
        &indexes,
        |index, code| OffsetCommitResponsePartition::default().with_partition_index(index).with_error_code(code),
        |name, partitions| OffsetCommitResponseTopic::default().with_name(name).with_partitions(partitions),
    );
    OffsetCommitResponse::default().with_topics(topics)
}

/// One partition's offset as `OffsetCommit` and `TxnOffsetCommit` carry it.
#[derive(Debug)]
pub struct WireCommit {
    /// The partition index.
    pub index: i32,
    /// The next offset to read.
    pub offset: i64,
    /// Its metadata.
    pub metadata: Option<StrBytes>,
    /// The leader epoch of the record before it (-1: unknown).
    pub leader_epoch: i32,
}

/// A commit request's topics as the service takes them, with the names and partition indexes
/// to answer under (negative indexes are echoed as sent).
pub fn commit_topics(
    topics: impl Iterator<Item = (TopicName, Vec<WireCommit>)>,
) -> (Vec<CommitTopic>, Vec<String>, Vec<Vec<i32>>) {
    let (mut commits, mut names, mut indexes) = (Vec::new(), Vec::new(), Vec::new());
    for (name, partitions) in topics {
        let topic = name.0.to_string();
        indexes.push(partitions.iter().map(|p| p.index).collect());
        names.push(topic.clone());
        let partitions = partitions
            .into_iter()
            .map(|p| CommitPartition {
                partition: partition_index(p.index),
                offset: p.offset,
                metadata: p.metadata.as_ref().map(text).unwrap_or_default(),
                leader_epoch: known_epoch(p.leader_epoch),
            })
            .collect();
        commits.push(CommitTopic { topic, partitions });
    }
    (commits, names, indexes)
}

/// The outcome of an offset commit (plain or transactional) as Kafka's per-partition codes,
/// under the request's topic names and partition indexes, in its order, built into the answer's
/// types by `partition` and `topic`. A refusal of the whole request or of the group is every
/// partition's answer.
pub fn commit_answers<P, T>(
    committed: Result<Answer<Vec<TopicAnswers<()>>>, crate::service::RequestError>,
    names: Vec<String>,
    indexes: &[Vec<i32>],
    partition: impl Fn(i32, i16) -> P,
    topic: impl Fn(TopicName, Vec<P>) -> T,
) -> Vec<T> {
    let answered: Result<Vec<TopicAnswers<()>>, i16> = match committed {
        Ok(Ok(answers)) => Ok(answers),
        Ok(Err(refusal)) => Err(errors::code(&refusal)),
        Err(e) => Err(errors::request_error(&e)),
    };
    names
        .into_iter()
        .zip(indexes)
        .enumerate()
        .map(|(ti, (name, indexes))| {
            let partitions = indexes
                .iter()
                .enumerate()
                .map(|(pi, &index)| {
                    let code = match &answered {
                        Err(code) => *code,
                        Ok(answers) => answers
                            .get(ti)
                            .and_then(|t| t.partitions.get(pi))
                            .map_or(kafka_code(ErrorCode::UnknownServerError), |(_, a)| {
                                a.as_ref().err().map_or(0, errors::code)
                            }),
                    };
                    partition(index, code)
                })
                .collect();
            topic(topic_name(name), partitions)
        })
        .collect()
}

/// One group's committed offsets as the service answers them, or the code refusing the group.
type GroupOffsets = Result<Answers<Option<CommittedOffset>>, i16>;

/// `OffsetFetch`, versions 1 to 9: one group (v1–7; from v2 a null topic list asks for every
/// committed partition) or many (v8+, each answered on its own). With `require_stable` (v7+) a
/// partition with a transactional commit pending answers `UNSTABLE_OFFSET_COMMIT`.
pub async fn offset_fetch(
    service: &Service,
    ctx: &RequestContext,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let require_stable = request.require_stable;
    // `None` (a null list) asks for every committed partition, as the service's empty list does;
    // an empty list asks for none, and is answered without asking the coordinator.
    let fetch = |group_id: GroupId, topics: Option<Vec<NamedPartitions>>| async move {
        let offsets = match topics {
            Some(topics) if topics.is_empty() => Ok(Ok(Vec::new())),
            topics => service.fetch_offsets(ctx, &group_id.0, topics.unwrap_or_default(), require_stable).await,
        };
        let offsets: GroupOffsets = match offsets {
            Ok(Ok(answers)) => Ok(answers),
            Ok(Err(refusal)) => Err(errors::code(&refusal)),
            Err(e) => Err(errors::request_error(&e)),
        };
        (group_id, offsets)
    };
    let named = |name: &str, indexes: &[i32]| NamedPartitions {
        topic: name.to_string(),
        partitions: indexes.iter().map(|&i| partition_index(i)).collect(),
    };
    if version >= 8 {
        let mut groups = Vec::with_capacity(request.groups.len());
        for g in &request.groups {
            let topics =
                g.topics.as_ref().map(|ts| ts.iter().map(|t| named(&t.name.0, &t.partition_indexes)).collect());
            let (group_id, offsets) = fetch(g.group_id.clone(), topics).await;
            let group = OffsetFetchResponseGroup::default().with_group_id(group_id);
            groups.push(match offsets {
                Err(code) => group.with_error_code(code),
                Ok(answers) => group.with_topics(
                    answers
                        .into_iter()
                        .map(|t| {
                            OffsetFetchResponseTopics::default().with_name(topic_name(t.topic)).with_partitions(
                                t.partitions
                                    .into_iter()
                                    .map(|(p, a)| {
                                        let (offset, metadata, epoch, code) = committed(a);
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(i32::try_from(p).unwrap_or(-1))
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(Some(str_bytes(metadata)))
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                        })
                        .collect(),
                ),
            });
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let topics: Option<Vec<NamedPartitions>> =
        request.topics.as_ref().map(|ts| ts.iter().map(|t| named(&t.name.0, &t.partition_indexes)).collect());
    let (_, offsets) = fetch(request.group_id.clone(), topics.clone()).await;
    match offsets {
        // Version 1 has no top-level code: each partition named carries it.
        Err(code) if version < 2 => {
            let answers = topics
                .unwrap_or_default()
                .into_iter()
                .map(|t| TopicAnswers {
                    topic: t.topic,
                    partitions: t.partitions.into_iter().map(|p| (p, Ok(None))).collect(),
                })
                .collect();
            offsets_v1(answers, code)
        }
        Err(code) => OffsetFetchResponse::default().with_error_code(code),
        Ok(answers) => offsets_v1(answers, 0),
    }
}

/// An `OffsetFetch` answer of versions 1 to 7: each partition's committed offset, or
/// `group_code` in place of every partition's own when it is not 0 (a refused group).
fn offsets_v1(answers: Answers<Option<CommittedOffset>>, group_code: i16) -> OffsetFetchResponse {
    let topics = answers
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .into_iter()
                .map(|(p, a)| {
                    let (offset, metadata, epoch, code) = committed(a);
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(i32::try_from(p).unwrap_or(-1))
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(str_bytes(metadata)))
                        .with_error_code(if group_code != 0 { group_code } else { code })
                })
                .collect();
            OffsetFetchResponseTopic::default().with_name(topic_name(t.topic)).with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

/// A partition's committed offset as Kafka answers it: the offset (-1 for none), its metadata,
/// its leader epoch (-1 when the committer gave none), and the error code.
fn committed(answer: Answer<Option<CommittedOffset>>) -> (i64, String, i32, i16) {
    match answer {
        Ok(Some(c)) => (c.offset, c.metadata, c.leader_epoch.unwrap_or(-1), 0),
        Ok(None) => (-1, String::new(), -1, 0),
        Err(refusal) => (-1, String::new(), -1, errors::code(&refusal)),
    }
}

/// A group state's name as Kafka's answers spell it (`Stable`, `PreparingRebalance`,
/// `Reconciling`, ...): Rill's KIP-848 names are lower-case.
fn kafka_state(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// A group's type as `ListGroups` v5 names it: `consumer` for KIP-848 groups, `classic` for
/// the rest (Kafka lists groups with only committed offsets as classic too).
fn group_type(protocol: &str) -> &'static str {
    if protocol == "consumer" {
        "consumer"
    } else {
        "classic"
    }
}

/// `ListGroups`, versions 0 to 5: the groups whose coordinator is this node (an admin client asks
/// every node), filtered by state (v4+, case-insensitive) and by type (v5+).
pub fn list_groups(service: &Service, ctx: &RequestContext, request: ListGroupsRequest) -> ListGroupsResponse {
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_ascii_lowercase()).collect();
    let types: Vec<String> = request.types_filter.iter().map(|s| s.to_ascii_lowercase()).collect();
    let groups = service
        .list_groups(ctx)
        .into_iter()
        .filter(|g| states.is_empty() || states.contains(&g.state.to_ascii_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == group_type(&g.protocol)))
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(g.group_id)))
                .with_protocol_type(str_bytes(g.protocol_type))
                .with_group_state(str_bytes(kafka_state(&g.state)))
                .with_group_type(StrBytes::from_static_str(group_type(&g.protocol)))
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

/// `DescribeGroups`, versions 0 to 6: each group on its own. A classic group with its members'
/// subscriptions and assignments; a KIP-848 group with its members (their assignments are
/// described by `ConsumerGroupDescribe`, as in Kafka). A group that does not exist is `Dead`
/// without an error before v6 and `GROUP_ID_NOT_FOUND` from v6 (KIP-1043). Authorized operations
/// are not provided yet.
pub fn describe_groups(
    service: &Service,
    ctx: &RequestContext,
    request: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let groups = request
        .groups
        .into_iter()
        .map(|group_id| {
            let described =
                DescribedGroup::default().with_group_id(group_id.clone()).with_authorized_operations(i32::MIN);
            match service.describe_group(ctx, &group_id.0) {
                Ok(d) => {
                    let described = described.with_group_state(str_bytes(kafka_state(&d.state)));
                    match d.classic {
                        Some(c) => described
                            .with_protocol_type(str_bytes(c.protocol_type))
                            .with_protocol_data(str_bytes(c.protocol))
                            .with_members(
                                c.members
                                    .into_iter()
                                    .map(|m| {
                                        DescribedGroupMember::default()
                                            .with_member_id(str_bytes(m.member_id))
                                            .with_group_instance_id(m.instance_id.map(str_bytes))
                                            .with_client_id(str_bytes(m.client_id))
                                            .with_client_host(str_bytes(m.client_host))
                                            .with_member_metadata(m.metadata)
                                            .with_member_assignment(m.assignment)
                                    })
                                    .collect(),
                            ),
                        None => described
                            .with_protocol_type(StrBytes::from_static_str(if d.members.is_empty() {
                                ""
                            } else {
                                "consumer"
                            }))
                            .with_members(
                                d.members
                                    .into_iter()
                                    .map(|m| {
                                        DescribedGroupMember::default()
                                            .with_member_id(str_bytes(m.member_id))
                                            .with_group_instance_id(m.instance_id.map(str_bytes))
                                            .with_client_id(str_bytes(m.client_id))
                                            .with_client_host(str_bytes(m.client_host))
                                    })
                                    .collect(),
                            ),
                    }
                }
                Err(refusal) if refusal.code == ErrorCode::GroupIdNotFound && version < 6 => {
                    described.with_group_state(StrBytes::from_static_str("Dead"))
                }
                Err(refusal) => described
                    .with_error_code(errors::code(&refusal))
                    .with_error_message((version >= 6).then(|| str_bytes(refusal.message))),
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

/// `DeleteGroups`, versions 0 to 2: each group, with its committed offsets, deleted on its own
/// (a group with members: `NON_EMPTY_GROUP`; one this node does not coordinate:
/// `NOT_COORDINATOR`, as Kafka's admin client expects from each group's coordinator).
pub async fn delete_groups(
    service: &Service,
    ctx: &RequestContext,
    request: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let deletions = request.groups_names.into_iter().map(|group_id| async move {
        let code = service.delete_group(ctx, &group_id.0).await.err().map_or(0, |r| errors::code(&r));
        DeletableGroupResult::default().with_group_id(group_id).with_error_code(code)
    });
    DeleteGroupsResponse::default().with_results(futures::future::join_all(deletions).await)
}

/// `OffsetDelete`, version 0: some committed offsets of a group deleted, all or none. A refusal
/// that concerns the group is the answer's code; one that concerns the partitions (a topic the
/// group is still subscribed to, an unknown or forbidden topic) is every partition's code, where
/// Kafka's clients look for it.
pub async fn offset_delete(
    service: &Service,
    ctx: &RequestContext,
    request: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let topics: Vec<NamedPartitions> = request
        .topics
        .iter()
        .map(|t| NamedPartitions {
            topic: t.name.0.to_string(),
            partitions: t.partitions.iter().map(|p| partition_index(p.partition_index)).collect(),
        })
        .collect();
    let (group_code, partition_code) = match service.delete_offsets(ctx, &request.group_id.0, topics).await {
        Ok(Ok(())) => (0, 0),
        Ok(Err(refusal)) => match refusal.code {
            ErrorCode::GroupSubscribedToTopic
            | ErrorCode::UnknownTopicOrPartition
            | ErrorCode::TopicAuthorizationFailed => (0, errors::code(&refusal)),
            _ => (errors::code(&refusal), 0),
        },
        Err(e) => (errors::request_error(&e), 0),
    };
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(partition_code)
                })
                .collect();
            OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_error_code(group_code).with_topics(topics)
}

//! The service layer's decisions on a running one-node cluster (in memory): authorization per
//! resource — a request touching a denied resource answers that entry with its authorization
//! error and serves the rest. (Real builds: the simulation has its own harness.)
#![cfg(not(madsim))]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_broker::{Acks, Isolation};
use rill_meta::PartitionKind;
use rill_proto::common::ErrorCode;

use super::authz::{Authorization, Authorizer, Operation, Resource, ResourceType};
use super::checks::{CommitPartition, CommitTopic};
use super::records::{FetchPartition, FetchRequest, FetchTopic, ProduceRequest, TopicBatches};
use super::topics::CreateTopic;
use super::{Answer, Principal, RequestContext, RequestError, Service};
use crate::api::rules::{rpc, rule};
use crate::coordinators::{Coordinators, Shard};
use crate::node::Node;

/// How long the one-node cluster may take to elect its leaders and create a topic.
const SETTLE: Duration = Duration::from_secs(30);

/// Denies the listed (type, name, operation) triples; allows everything else.
struct Deny(Vec<(ResourceType, &'static str, Operation)>);

impl Authorizer for Deny {
    fn allows(&self, _p: &Principal, resource: &Resource, operation: Operation) -> bool {
        !self.0.iter().any(|(kind, name, op)| resource.kind == *kind && resource.name == *name && operation == *op)
    }
}

/// A running one-node cluster on an in-memory engine, its coordinator shards, and its service
/// allowing everything.
pub(crate) async fn one_node() -> (Arc<Node>, Arc<Coordinators>, Service) {
    one_node_with(|_| {}).await
}

/// [`one_node`], its configuration changed by `configure` first.
pub(crate) async fn one_node_with(
    configure: impl FnOnce(&mut crate::Config),
) -> (Arc<Node>, Arc<Coordinators>, Service) {
    let members = BTreeMap::from([(1, "127.0.0.1:1".to_string())]);
    let mut config = crate::Config::for_member(1, "127.0.0.1:2".parse().unwrap(), members, "/unused".into()).unwrap();
    configure(&mut config);
    let node = Node::start(config, Arc::new(rill_storage::MemEngine::new())).await.unwrap();
    let coordinators = Coordinators::start(&node);
    let service = Service::new(node.clone(), coordinators.clone(), Authorization::default());
    (node, coordinators, service)
}

/// The context of a gRPC request to `rpc` by an anonymous caller.
pub(crate) fn ctx(rpc: &str) -> RequestContext {
    let needs = rule(rpc).map(|r| r.needs).unwrap_or_default();
    RequestContext {
        client_id: "tests".into(),
        client_host: "192.0.2.7".into(),
        ..RequestContext::anonymous(super::Listener::Grpc, needs)
    }
}

/// Polls `done` until it holds, failing the test after `SETTLE`.
pub(crate) async fn must_reach<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + SETTLE;
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "{what} within {SETTLE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates topic `name` with `partitions` partitions and waits until each has a leader here.
pub(crate) async fn must_create(node: &Node, service: &Service, name: &str, partitions: u32) {
    let create = CreateTopic { name: name.into(), partitions, replication_factor: 1, configs: Vec::new() };
    must_reach("the topic created", || {
        let create = create.clone();
        async move {
            let created = service.create_topic(&ctx(rpc::CREATE_TOPIC), create).await;
            matches!(code(&created), ErrorCode::None | ErrorCode::TopicAlreadyExists)
        }
    })
    .await;
    must_reach("its partitions led", || async {
        let meta = node.meta();
        let Some(t) = meta.topics.get(name) else { return false };
        t.partitions.iter().all(|p| node.partition_by_group(p.group).is_some_and(|r| r.state().is_leader))
    })
    .await;
}

/// A one-record batch without a producer id.
fn batch(value: &[u8]) -> Bytes {
    let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None);
    let record = rill_records::Record { value: Some(Bytes::copy_from_slice(value)), ..Default::default() };
    builder.push(record).unwrap();
    builder.build().unwrap()
}

fn code<T>(answer: &Answer<T>) -> ErrorCode {
    answer.as_ref().err().map_or(ErrorCode::None, |e| e.code)
}

#[tokio::test]
async fn a_denied_topic_is_refused_on_its_own_and_the_rest_is_served() {
    let (node, _, allow) = one_node().await;
    must_create(&node, &allow, "open", 1).await;
    must_create(&node, &allow, "secret", 1).await;
    let deny = |denied| allow.with_authorization(Authorization::new(Arc::new(Deny(denied))));

    tracing::info!("--- produce: Write on one topic denied");
    let service = deny(vec![(ResourceType::Topic, "secret", Operation::Write)]);
    let produce = ProduceRequest {
        acks: Ok(Acks::All),
        topics: ["open", "secret"]
            .iter()
            .map(|t| TopicBatches { topic: t.to_string(), partitions: vec![(0, batch(b"v"))], ..Default::default() })
            .collect(),
        ..Default::default()
    };
    let answers = service.produce(&ctx(rpc::PRODUCE), produce.clone()).await.unwrap();
    assert_eq!(code(&answers[0].partitions[0].1), ErrorCode::None, "{answers:?}");
    assert_eq!(code(&answers[1].partitions[0].1), ErrorCode::TopicAuthorizationFailed);
    // With the whole-request resource denied, every partition carries its refusal.
    let service = deny(vec![(ResourceType::TransactionalId, "tx", Operation::Write)]);
    let transactional = ProduceRequest { transactional_id: "tx".into(), transaction_version: 2, ..produce.clone() };
    let answers = service.produce(&ctx(rpc::PRODUCE), transactional).await.unwrap();
    for t in &answers {
        assert_eq!(code(&t.partitions[0].1), ErrorCode::TransactionalIdAuthorizationFailed, "{answers:?}");
    }

    tracing::info!("--- fetch: Read on one topic denied; the other's record comes back");
    let service = deny(vec![(ResourceType::Topic, "secret", Operation::Read)]);
    let fetch = FetchRequest {
        isolation: Isolation::ReadUncommitted,
        topics: ["open", "secret"]
            .iter()
            .map(|t| FetchTopic {
                topic: t.to_string(),
                partitions: vec![FetchPartition { partition: 0, offset: 0, max_bytes: 0, current_leader_epoch: None }],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let answers = service.fetch(&ctx(rpc::FETCH), fetch).await.unwrap();
    let open = answers[0].partitions[0].1.as_ref().unwrap();
    assert_eq!(open.batches.len(), 1, "the allowed topic's record is served");
    assert_eq!(code(&answers[1].partitions[0].1), ErrorCode::TopicAuthorizationFailed);

    tracing::info!("--- metadata: Describe denied hides the topic from listings and refuses it by name");
    let service = deny(vec![(ResourceType::Topic, "secret", Operation::Describe)]);
    let all = service.metadata(&ctx(rpc::METADATA), None).unwrap();
    let listed: Vec<&str> = all.topics.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(listed, vec!["open"]);
    let me = service.node().id();
    let open = all.topics[0].1.as_ref().unwrap();
    let layout = &open.partitions[0];
    assert!(layout.leader.is_some_and(|(id, term)| id == me && term >= 1), "{layout:?}");
    assert_eq!(layout.in_sync, Some(vec![me]), "the leader counts its in-sync replicas");

    tracing::info!("--- fetch: the leader epoch a client saw is checked against the leader's term");
    let term = layout.leader.map(|(_, term)| term).unwrap();
    let at_epoch = |epoch: u64| FetchRequest {
        isolation: Isolation::ReadUncommitted,
        topics: vec![FetchTopic {
            topic: "open".into(),
            partitions: vec![FetchPartition {
                partition: 0,
                offset: 0,
                max_bytes: 0,
                current_leader_epoch: Some(epoch as i32),
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let answers = service.fetch(&ctx(rpc::FETCH), at_epoch(term)).await.unwrap();
    let read = answers[0].partitions[0].1.as_ref().unwrap();
    assert_eq!(read.batches[0].leader_epoch, term, "the batch carries the term it was appended in");
    let answers = service.fetch(&ctx(rpc::FETCH), at_epoch(term - 1)).await.unwrap();
    assert_eq!(code(&answers[0].partitions[0].1), ErrorCode::FencedLeaderEpoch);
    let answers = service.fetch(&ctx(rpc::FETCH), at_epoch(term + 1)).await.unwrap();
    assert_eq!(code(&answers[0].partitions[0].1), ErrorCode::UnknownLeaderEpoch);
    assert!(service.metadata(&ctx(rpc::METADATA), Some(Vec::new())).unwrap().topics.is_empty());
    let named = service.metadata(&ctx(rpc::METADATA), Some(vec!["secret".into(), "open".into()])).unwrap();
    assert_eq!(code(&named.topics[0].1), ErrorCode::TopicAuthorizationFailed);
    assert_eq!(code(&named.topics[1].1), ErrorCode::None);
    let topics: Vec<String> = service.list_topics(&ctx(rpc::LIST_TOPICS), false).into_iter().map(|t| t.name).collect();
    assert_eq!(topics, vec!["open".to_string()]);

    tracing::info!("--- commits: the group denied refuses the commit; a topic denied, its partitions");
    let commit = |topics: &[&str]| -> Vec<CommitTopic> {
        topics
            .iter()
            .map(|t| CommitTopic {
                topic: t.to_string(),
                partitions: vec![CommitPartition {
                    partition: 0,
                    offset: 1,
                    metadata: String::new(),
                    leader_epoch: None,
                }],
            })
            .collect()
    };
    must_reach("the group's coordinator", || async {
        allow.find_coordinator(&ctx(rpc::FIND_COORDINATOR), PartitionKind::ConsumerOffsets, "g").is_ok()
    })
    .await;
    let service = deny(vec![(ResourceType::Topic, "secret", Operation::Read)]);
    // The coordinator may still be loading its partition: asked again until it answers.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let topics = loop {
        let commit = commit(&["open", "secret"]);
        match service.commit_offsets(&ctx(rpc::COMMIT_OFFSETS), "g", "", -1, commit).await.unwrap() {
            Ok(topics) => break topics,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "the commit answered within {SETTLE:?}: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code(&topics[0].partitions[0].1), ErrorCode::None);
    assert_eq!(code(&topics[1].partitions[0].1), ErrorCode::TopicAuthorizationFailed);
    let committed = allow.fetch_offsets(&ctx(rpc::FETCH_OFFSETS), "g", Vec::new(), false).await.unwrap().unwrap();
    let named: Vec<&str> = committed.iter().map(|t| t.topic.as_str()).collect();
    assert_eq!(named, vec!["open"], "only the allowed partition was committed");
    let service = deny(vec![(ResourceType::Group, "g", Operation::Read)]);
    let refused = service.commit_offsets(&ctx(rpc::COMMIT_OFFSETS), "g", "", -1, commit(&["open"])).await.unwrap();
    assert_eq!(code(&refused), ErrorCode::GroupAuthorizationFailed);

    tracing::info!("--- the cluster: a denied description refuses the request, a producer id its answer");
    let service = deny(vec![
        (ResourceType::Cluster, super::authz::CLUSTER_RESOURCE, Operation::Describe),
        (ResourceType::Cluster, super::authz::CLUSTER_RESOURCE, Operation::IdempotentWrite),
    ]);
    let described = service.describe_cluster(&ctx(rpc::DESCRIBE_CLUSTER)).await;
    assert!(matches!(described, Err(RequestError::Denied(_))), "{described:?}");
    let id = service.init_producer_id(&ctx(rpc::INIT_PRODUCER_ID), Default::default()).await;
    assert_eq!(code(&id), ErrorCode::ClusterAuthorizationFailed);

    tracing::info!("--- transactional ids: each described id decided on its own");
    let service = deny(vec![(ResourceType::TransactionalId, "hidden", Operation::Describe)]);
    let ids = vec!["hidden".to_string(), "unknown".to_string()];
    let described = service.describe_transactions(&ctx(rpc::DESCRIBE_TRANSACTIONS), &ids).await.unwrap();
    assert_eq!(code(&described[0].1), ErrorCode::TransactionalIdAuthorizationFailed);
    assert_ne!(code(&described[1].1), ErrorCode::TransactionalIdAuthorizationFailed);

    node.stop().await;
}

#[tokio::test]
async fn a_coordinator_shard_lives_while_its_node_leads_the_partition() {
    let (node, coordinators, service) = one_node().await;
    let offsets_partitions = node.config().consumer_offsets_partitions as usize;
    let transaction_partitions = node.config().transaction_state_partitions as usize;

    tracing::info!("--- the node leads every internal partition: a shard each, observing its machine");
    must_reach("a shard for every internal partition", || async {
        coordinators.groups().all().len() == offsets_partitions
            && coordinators.transactions().all().len() == transaction_partitions
    })
    .await;
    for shard in coordinators.groups().all() {
        assert!(shard.partition().peek(|m| m.is_observed()), "the group shard observes its partition");
    }

    tracing::info!("--- a member joins through its group's shard, which starts its session");
    must_create(&node, &service, "events", 2).await;
    let heartbeat = super::groups::ConsumerHeartbeat {
        request: rill_coordinator::groups::HeartbeatRequest {
            group_id: "g".into(),
            member_epoch: 0,
            rebalance_timeout_ms: Some(30_000),
            subscribed_topics: Some(vec!["events".into()]),
            owned: Some(Default::default()),
            ..Default::default()
        },
        wait_ms: None,
    };
    let joined = service.consumer_group_heartbeat(&ctx(rpc::CONSUMER_GROUP_HEARTBEAT), heartbeat).await.unwrap();
    let joined = joined.unwrap();
    assert!(joined.answer.member_epoch > 0, "{joined:?}");
    let coordinator = crate::service::routing::group_coordinator(&node, "g").unwrap();
    let shard = coordinators.groups().of(&coordinator).unwrap();
    assert!(
        !shard.sessions().expired(rill_rt::now() + Duration::from_secs(3600)).is_empty(),
        "the member's session is timed by its coordinator's shard"
    );

    tracing::info!("--- the replicas stop: every shard resigns and detaches from its machine");
    node.stop().await;
    must_reach("no shard left", || async {
        coordinators.groups().all().is_empty() && coordinators.transactions().all().is_empty()
    })
    .await;
    assert!(!coordinator.peek(|m| m.is_observed()), "the resigned shard detached from the machine");
}

#[tokio::test]
async fn classic_members_join_a_generation_sync_their_assignments_and_commit_under_it() {
    use rill_coordinator::groups::classic::{Heartbeat, JoinGroup, LeaveGroup, Leaving, Protocol, SyncGroup};

    use super::classic::JoinOutcome;

    let (node, _, service) = one_node().await;
    must_create(&node, &service, "orders", 2).await;
    must_reach("the group's coordinator", || async {
        service.find_coordinator(&ctx(rpc::FIND_COORDINATOR), PartitionKind::ConsumerOffsets, "cg").is_ok()
    })
    .await;
    let join = |member_id: String| JoinGroup {
        group_id: "cg".into(),
        member_id,
        protocol_type: "consumer".into(),
        protocols: vec![Protocol { name: "range".into(), metadata: Bytes::from_static(b"orders") }],
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 5_000,
        ..Default::default()
    };

    tracing::info!("--- a new member is first given its id, then joins the first generation and leads it");
    let (id, refusal) = match service.join_group(&ctx(rpc::JOIN_GROUP), join(String::new())).await.unwrap() {
        JoinOutcome::MemberIdRequired { member_id, refusal } => (member_id, refusal),
        other => panic!("a first join without an id is answered with one: {other:?}"),
    };
    assert_eq!(refusal.code, ErrorCode::MemberIdRequired);
    let JoinOutcome::Joined(joined) = service.join_group(&ctx(rpc::JOIN_GROUP), join(id.clone())).await.unwrap() else {
        panic!("the member joins with its id")
    };
    assert_eq!((joined.member_id.as_str(), joined.leader.as_str(), joined.generation), (id.as_str(), id.as_str(), 1));
    assert_eq!(joined.members.len(), 1, "the leader is told every member with its metadata");

    tracing::info!("--- the leader's sync is answered once the generation's assignment is stored");
    let sync = SyncGroup {
        group_id: "cg".into(),
        member_id: id.clone(),
        generation: 1,
        assignments: vec![(id.clone(), Bytes::from_static(b"0,1"))],
        ..Default::default()
    };
    let synced = service.sync_group(&ctx(rpc::SYNC_GROUP), sync).await.unwrap();
    assert_eq!(synced.assignment, Bytes::from_static(b"0,1"));
    let stored = crate::service::routing::group_coordinator(&node, "cg")
        .unwrap()
        .peek(|m| m.classic_groups().get("cg").map(|g| (g.generation, g.members.len())));
    assert_eq!(stored, Some((1, 1)), "the generation is replicated before the sync is answered");
    let heartbeat = Heartbeat { group_id: "cg".into(), member_id: id.clone(), generation: 1, ..Default::default() };
    assert_eq!(service.group_heartbeat(&ctx(rpc::GROUP_HEARTBEAT), &heartbeat), Ok(()));

    tracing::info!("--- it commits under its generation; a stale generation is refused");
    let commit = vec![CommitTopic {
        topic: "orders".into(),
        partitions: vec![CommitPartition { partition: 0, offset: 3, metadata: String::new(), leader_epoch: None }],
    }];
    let committed = service.commit_offsets(&ctx(rpc::COMMIT_OFFSETS), "cg", &id, 1, commit.clone()).await.unwrap();
    assert_eq!(code(&committed.unwrap()[0].partitions[0].1), ErrorCode::None);
    let stale = service.commit_offsets(&ctx(rpc::COMMIT_OFFSETS), "cg", &id, 0, commit).await.unwrap();
    assert_eq!(code(&stale), ErrorCode::IllegalGeneration);

    tracing::info!("--- the group is described and listed as classic; its member leaves");
    let described = service.describe_group(&ctx(rpc::DESCRIBE_GROUP), "cg").unwrap();
    assert_eq!((described.protocol.as_str(), described.state.as_str()), ("classic", "Stable"));
    assert_eq!(described.classic.map(|c| c.members.len()), Some(1));
    let listed = service.list_groups(&ctx(rpc::LIST_GROUPS));
    assert!(listed.iter().any(|g| g.group_id == "cg" && g.protocol == "classic"), "{listed:?}");
    let leave = LeaveGroup { group_id: "cg".into(), members: vec![Leaving { member_id: id, instance_id: None }] };
    let left = service.leave_group(&ctx(rpc::LEAVE_GROUP), &leave).unwrap().unwrap();
    assert!(left[0].result.is_ok());
    node.stop().await;
}

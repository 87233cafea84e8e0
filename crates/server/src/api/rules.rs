//! The authorization hook: every public RPC mapped to the resources it acts on and the
//! operation it performs on each, checked before the handler does any work.
//!
//! The model is Kafka's ACL model, so that client authentication and ACLs (and the Kafka
//! listener, whose requests map onto the same rules) plug in here without touching a handler:
//!
//! * a [`Resource`] is the cluster, a topic, a consumer group or a transactional id;
//! * an [`Operation`] is what is done to it (Kafka's operation names);
//! * [`RULES`] states, for each RPC of the public services, which (resource type, operation)
//!   pairs it needs; the request message names the resources ([`Resources`]);
//! * an [`Authorizer`] decides, for a [`Principal`], each (resource, operation).
//!
//! Until clients authenticate, every caller is [`Principal::Anonymous`] and the node's
//! authorizer is [`AllowAll`]. An RPC with no rule is refused (deny by default), and a test
//! over the compiled descriptor set fails when a public RPC has no rule — so no RPC can be
//! added to the public services without stating what it needs.

use std::fmt;
use std::sync::Arc;

use rill_proto::admin::{
    AdmitNodeRequest, AlterTopicConfigRequest, CoordinatorKind, CreatePartitionsRequest, CreateTopicRequest,
    DeleteRecordsRequest, DeleteTopicRequest, DescribeClusterRequest, DescribeTopicRequest, FindCoordinatorRequest,
    ListTopicsRequest, MetadataRequest,
};
use rill_proto::groups::{
    CommitOffsetsRequest, ConsumerGroupHeartbeatRequest, DeleteGroupRequest, DeleteOffsetsRequest,
    DescribeGroupRequest, FetchOffsetsRequest, ListGroupsRequest, TxnCommitOffsetsRequest,
};
use rill_proto::records::{FetchRequest, InitProducerIdRequest, ListOffsetsRequest, ProduceRequest};
use rill_proto::transactions::{
    AbortTransactionRequest, AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeTransactionsRequest,
    EndTxnRequest, ListTransactionsRequest,
};

/// The name the cluster resource goes by (Kafka's is `kafka-cluster`).
pub const CLUSTER_RESOURCE: &str = "rill-cluster";

/// The gRPC paths of the public RPCs, as handlers name them.
pub mod rpc {
    /// `/rill.records.Records/Produce`.
    pub const PRODUCE: &str = "/rill.records.Records/Produce";
    /// `/rill.records.Records/Fetch`.
    pub const FETCH: &str = "/rill.records.Records/Fetch";
    /// `/rill.records.Records/ListOffsets`.
    pub const LIST_OFFSETS: &str = "/rill.records.Records/ListOffsets";
    /// `/rill.records.Records/InitProducerId`.
    pub const INIT_PRODUCER_ID: &str = "/rill.records.Records/InitProducerId";
    /// `/rill.admin.Admin/CreateTopic`.
    pub const CREATE_TOPIC: &str = "/rill.admin.Admin/CreateTopic";
    /// `/rill.admin.Admin/DeleteTopic`.
    pub const DELETE_TOPIC: &str = "/rill.admin.Admin/DeleteTopic";
    /// `/rill.admin.Admin/AlterTopicConfig`.
    pub const ALTER_TOPIC_CONFIG: &str = "/rill.admin.Admin/AlterTopicConfig";
    /// `/rill.admin.Admin/CreatePartitions`.
    pub const CREATE_PARTITIONS: &str = "/rill.admin.Admin/CreatePartitions";
    /// `/rill.admin.Admin/ListTopics`.
    pub const LIST_TOPICS: &str = "/rill.admin.Admin/ListTopics";
    /// `/rill.admin.Admin/DescribeTopic`.
    pub const DESCRIBE_TOPIC: &str = "/rill.admin.Admin/DescribeTopic";
    /// `/rill.admin.Admin/DescribeCluster`.
    pub const DESCRIBE_CLUSTER: &str = "/rill.admin.Admin/DescribeCluster";
    /// `/rill.admin.Admin/Metadata`.
    pub const METADATA: &str = "/rill.admin.Admin/Metadata";
    /// `/rill.admin.Admin/FindCoordinator`.
    pub const FIND_COORDINATOR: &str = "/rill.admin.Admin/FindCoordinator";
    /// `/rill.admin.Admin/AdmitNode`.
    pub const ADMIT_NODE: &str = "/rill.admin.Admin/AdmitNode";
    /// `/rill.admin.Admin/DeleteRecords`.
    pub const DELETE_RECORDS: &str = "/rill.admin.Admin/DeleteRecords";
    /// `/rill.groups.Groups/ConsumerGroupHeartbeat`.
    pub const CONSUMER_GROUP_HEARTBEAT: &str = "/rill.groups.Groups/ConsumerGroupHeartbeat";
    /// `/rill.groups.Groups/ListGroups`.
    pub const LIST_GROUPS: &str = "/rill.groups.Groups/ListGroups";
    /// `/rill.groups.Groups/DescribeGroup`.
    pub const DESCRIBE_GROUP: &str = "/rill.groups.Groups/DescribeGroup";
    /// `/rill.groups.Groups/DeleteGroup`.
    pub const DELETE_GROUP: &str = "/rill.groups.Groups/DeleteGroup";
    /// `/rill.groups.Groups/DeleteOffsets`.
    pub const DELETE_OFFSETS: &str = "/rill.groups.Groups/DeleteOffsets";
    /// `/rill.groups.Groups/CommitOffsets`.
    pub const COMMIT_OFFSETS: &str = "/rill.groups.Groups/CommitOffsets";
    /// `/rill.groups.Groups/FetchOffsets`.
    pub const FETCH_OFFSETS: &str = "/rill.groups.Groups/FetchOffsets";
    /// `/rill.transactions.Transactions/AddPartitionsToTxn`.
    pub const ADD_PARTITIONS_TO_TXN: &str = "/rill.transactions.Transactions/AddPartitionsToTxn";
    /// `Transactions.AddOffsetsToTxn`.
    pub const ADD_OFFSETS_TO_TXN: &str = "/rill.transactions.Transactions/AddOffsetsToTxn";
    /// `Groups.TxnCommitOffsets`.
    pub const TXN_COMMIT_OFFSETS: &str = "/rill.groups.Groups/TxnCommitOffsets";
    /// `/rill.transactions.Transactions/EndTxn`.
    pub const END_TXN: &str = "/rill.transactions.Transactions/EndTxn";
    /// `/rill.transactions.Transactions/DescribeTransactions`.
    pub const DESCRIBE_TRANSACTIONS: &str = "/rill.transactions.Transactions/DescribeTransactions";
    /// `/rill.transactions.Transactions/ListTransactions`.
    pub const LIST_TRANSACTIONS: &str = "/rill.transactions.Transactions/ListTransactions";
    /// `/rill.transactions.Transactions/AbortTransaction`.
    pub const ABORT_TRANSACTION: &str = "/rill.transactions.Transactions/AbortTransaction";
}

/// The kinds of resource an operation applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// The cluster as a whole (named [`CLUSTER_RESOURCE`]).
    Cluster,
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// A transactional id.
    TransactionalId,
}

/// What is done to a resource (Kafka's ACL operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Consume from a topic; commit offsets as a group.
    Read,
    /// Produce to a topic; use a transactional id.
    Write,
    /// Create a topic.
    Create,
    /// Delete a topic.
    Delete,
    /// Change a topic's shape (add partitions); change the cluster's membership.
    Alter,
    /// Learn that a resource exists and where it lives.
    Describe,
    /// Change a topic's configuration.
    AlterConfigs,
    /// Read a topic's configuration.
    DescribeConfigs,
    /// Produce idempotently (obtain a producer id without a transactional id).
    IdempotentWrite,
}

/// One resource, by type and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    /// Its type.
    pub kind: ResourceType,
    /// Its name ([`CLUSTER_RESOURCE`] for the cluster).
    pub name: String,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {:?}", self.kind, self.name)
    }
}

/// Who is asking. Clients do not authenticate yet, so every caller is anonymous; the
/// authentication issue adds the authenticated kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A caller that did not authenticate.
    Anonymous,
}

/// Decides whether a principal may perform an operation on a resource.
pub trait Authorizer: Send + Sync {
    /// True when `principal` may perform `operation` on `resource`.
    fn allows(&self, principal: &Principal, resource: &Resource, operation: Operation) -> bool;
}

/// The authorizer until client authentication lands: everything is allowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn allows(&self, _principal: &Principal, _resource: &Resource, _operation: Operation) -> bool {
        true
    }
}

/// How an RPC uses one of its (resource type, operation) pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Every resource of this type the request names must be allowed.
    Named,
    /// The answer lists resources of this type: only allowed ones are listed (Kafka's
    /// `Metadata` for all topics). Named resources, when the request names some, are checked
    /// as [`Check::Named`].
    Filter,
}

/// What one RPC needs.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The gRPC path, `/package.Service/Method`.
    pub rpc: &'static str,
    /// Each (resource type, operation) the RPC needs, and how it applies.
    pub needs: &'static [(ResourceType, Operation, Check)],
}

use Check::{Filter, Named};
use Operation as Op;
use ResourceType as R;

/// Every public RPC and what it needs. Kafka's mapping where Kafka has the request.
pub const RULES: &[Rule] = &[
    // With a transactional id: Write on it too (Kafka's Produce).
    Rule { rpc: rpc::PRODUCE, needs: &[(R::Topic, Op::Write, Named), (R::TransactionalId, Op::Write, Named)] },
    Rule { rpc: rpc::FETCH, needs: &[(R::Topic, Op::Read, Named)] },
    Rule { rpc: rpc::LIST_OFFSETS, needs: &[(R::Topic, Op::Describe, Named)] },
    // With a transactional id: Write on it; without: idempotent writes on the cluster.
    Rule {
        rpc: rpc::INIT_PRODUCER_ID,
        needs: &[(R::TransactionalId, Op::Write, Named), (R::Cluster, Op::IdempotentWrite, Named)],
    },
    Rule { rpc: rpc::CREATE_TOPIC, needs: &[(R::Topic, Op::Create, Named)] },
    Rule { rpc: rpc::DELETE_TOPIC, needs: &[(R::Topic, Op::Delete, Named)] },
    Rule { rpc: rpc::ALTER_TOPIC_CONFIG, needs: &[(R::Topic, Op::AlterConfigs, Named)] },
    Rule { rpc: rpc::CREATE_PARTITIONS, needs: &[(R::Topic, Op::Alter, Named)] },
    Rule { rpc: rpc::LIST_TOPICS, needs: &[(R::Topic, Op::Describe, Filter)] },
    Rule {
        rpc: rpc::DESCRIBE_TOPIC,
        needs: &[(R::Topic, Op::Describe, Named), (R::Topic, Op::DescribeConfigs, Named)],
    },
    Rule { rpc: rpc::DESCRIBE_CLUSTER, needs: &[(R::Cluster, Op::Describe, Named)] },
    Rule { rpc: rpc::METADATA, needs: &[(R::Topic, Op::Describe, Filter)] },
    Rule {
        rpc: rpc::FIND_COORDINATOR,
        needs: &[(R::Group, Op::Describe, Named), (R::TransactionalId, Op::Describe, Named)],
    },
    // Admitting a node changes the cluster's membership.
    Rule { rpc: rpc::ADMIT_NODE, needs: &[(R::Cluster, Op::Alter, Named)] },
    // Kafka's DeleteRecords needs Delete on the topic.
    Rule { rpc: rpc::DELETE_RECORDS, needs: &[(R::Topic, Op::Delete, Named)] },
    // Kafka's ConsumerGroupHeartbeat: Read on the group; Describe on each subscribed topic.
    Rule { rpc: rpc::CONSUMER_GROUP_HEARTBEAT, needs: &[(R::Group, Op::Read, Named), (R::Topic, Op::Describe, Named)] },
    // Kafka's ListGroups and DescribeGroups: Describe on each group (listings filtered).
    Rule { rpc: rpc::LIST_GROUPS, needs: &[(R::Group, Op::Describe, Filter)] },
    Rule { rpc: rpc::DESCRIBE_GROUP, needs: &[(R::Group, Op::Describe, Named)] },
    // Kafka's DeleteGroups: Delete on the group; OffsetDelete: Delete on the group, Read on each topic.
    Rule { rpc: rpc::DELETE_GROUP, needs: &[(R::Group, Op::Delete, Named)] },
    Rule { rpc: rpc::DELETE_OFFSETS, needs: &[(R::Group, Op::Delete, Named), (R::Topic, Op::Read, Named)] },
    Rule { rpc: rpc::COMMIT_OFFSETS, needs: &[(R::Group, Op::Read, Named), (R::Topic, Op::Read, Named)] },
    Rule { rpc: rpc::FETCH_OFFSETS, needs: &[(R::Group, Op::Describe, Named), (R::Topic, Op::Describe, Named)] },
    // Kafka's AddPartitionsToTxn: Write on the transactional id and on each topic.
    Rule {
        rpc: rpc::ADD_PARTITIONS_TO_TXN,
        needs: &[(R::TransactionalId, Op::Write, Named), (R::Topic, Op::Write, Named)],
    },
    // Kafka's AddOffsetsToTxn: Write on the transactional id, Read on the group.
    Rule {
        rpc: rpc::ADD_OFFSETS_TO_TXN,
        needs: &[(R::TransactionalId, Op::Write, Named), (R::Group, Op::Read, Named)],
    },
    // Kafka's TxnOffsetCommit: Write on the transactional id, Read on the group and each topic.
    Rule {
        rpc: rpc::TXN_COMMIT_OFFSETS,
        needs: &[(R::TransactionalId, Op::Write, Named), (R::Group, Op::Read, Named), (R::Topic, Op::Read, Named)],
    },
    // Kafka's EndTxn: Write on the transactional id.
    Rule { rpc: rpc::END_TXN, needs: &[(R::TransactionalId, Op::Write, Named)] },
    // Kafka's DescribeTransactions: Describe on each transactional id.
    Rule { rpc: rpc::DESCRIBE_TRANSACTIONS, needs: &[(R::TransactionalId, Op::Describe, Named)] },
    // Kafka's ListTransactions: lists only ids the caller may Describe.
    Rule { rpc: rpc::LIST_TRANSACTIONS, needs: &[(R::TransactionalId, Op::Describe, Filter)] },
    // Aborting another producer's transaction writes to the id (and fences its producer).
    Rule { rpc: rpc::ABORT_TRANSACTION, needs: &[(R::TransactionalId, Op::Write, Named)] },
];

/// The rule of RPC `rpc` (a gRPC path), if it has one.
pub fn rule(rpc: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.rpc == rpc)
}

/// The resources of one type a request names. Every public request message implements it.
pub trait Resources {
    /// The names of the resources of type `kind` this request acts on.
    fn names(&self, kind: ResourceType) -> Vec<&str>;
}

/// A refused request: the first resource the principal may not use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The RPC has no rule: refused, whatever the authorizer says.
    #[error("{rpc} has no authorization rule")]
    NoRule {
        /// The RPC.
        rpc: String,
    },
    /// The principal may not perform the operation on the resource.
    #[error("not authorized to {operation:?} {resource}")]
    Resource {
        /// The resource.
        resource: Resource,
        /// The operation.
        operation: Operation,
    },
}

/// The node's authorization: one authorizer, consulted by every public handler.
#[derive(Clone)]
pub struct Authorization {
    authorizer: Arc<dyn Authorizer>,
}

impl Default for Authorization {
    fn default() -> Self {
        Self::new(Arc::new(AllowAll))
    }
}

impl Authorization {
    /// Authorization by `authorizer`.
    pub fn new(authorizer: Arc<dyn Authorizer>) -> Self {
        Self { authorizer }
    }

    /// The principal behind `request`. Anonymous until clients authenticate.
    pub fn principal<T>(&self, _request: &tonic::Request<T>) -> Principal {
        Principal::Anonymous
    }

    /// Checks request `message` of RPC `rpc` for `principal`, before its handler runs.
    pub fn check(&self, principal: &Principal, rpc: &str, message: &impl Resources) -> Result<(), Denied> {
        let rule = rule(rpc).ok_or_else(|| Denied::NoRule { rpc: rpc.to_string() })?;
        for &(kind, operation, _) in rule.needs {
            for name in message.names(kind) {
                let resource = Resource { kind, name: name.to_string() };
                if !self.authorizer.allows(principal, &resource, operation) {
                    return Err(Denied::Resource { resource, operation });
                }
            }
        }
        Ok(())
    }

    /// [`Authorization::check`], answered as the gRPC status a handler returns.
    pub fn authorize(&self, principal: &Principal, rpc: &str, message: &impl Resources) -> Result<(), tonic::Status> {
        self.check(principal, rpc, message).map_err(|e| crate::errors::not_authorized_status(&e))
    }

    /// True when an answer of RPC `rpc` that lists resources may list `name` of type `kind`
    /// (its [`Check::Filter`] pairs; an RPC without one lists nothing it filters).
    pub fn lists(&self, principal: &Principal, rpc: &str, kind: ResourceType, name: &str) -> bool {
        let Some(rule) = rule(rpc) else { return false };
        let resource = Resource { kind, name: name.to_string() };
        rule.needs
            .iter()
            .filter(|(k, _, check)| *k == kind && *check == Filter)
            .all(|&(_, operation, _)| self.authorizer.allows(principal, &resource, operation))
    }
}

/// The topic names of a request's entries (a name that repeats is checked again: harmless,
/// and the request limits answer repeated entries anyway).
fn topics<'a>(kind: ResourceType, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    if kind == R::Topic {
        names.collect()
    } else {
        Vec::new()
    }
}

fn only(kind: ResourceType, wanted: ResourceType, name: &str) -> Vec<&str> {
    if kind == wanted {
        vec![name]
    } else {
        Vec::new()
    }
}

impl Resources for ProduceRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::TransactionalId if !self.transactional_id.is_empty() => vec![self.transactional_id.as_str()],
            R::TransactionalId => Vec::new(),
            _ => topics(kind, self.topics.iter().map(|t| t.topic.as_str())),
        }
    }
}

impl Resources for DeleteRecordsRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        topics(kind, self.topics.iter().map(|t| t.topic.as_str()))
    }
}

impl Resources for FetchRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        topics(kind, self.topics.iter().map(|t| t.topic.as_str()))
    }
}

impl Resources for ListOffsetsRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        topics(kind, self.topics.iter().map(|t| t.topic.as_str()))
    }
}

impl Resources for InitProducerIdRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match (kind, self.transactional_id.is_empty()) {
            (R::TransactionalId, false) => vec![self.transactional_id.as_str()],
            (R::Cluster, true) => vec![CLUSTER_RESOURCE],
            _ => Vec::new(),
        }
    }
}

impl Resources for AddPartitionsToTxnRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::TransactionalId => vec![self.transactional_id.as_str()],
            _ => topics(kind, self.topics.iter().map(|t| t.topic.as_str())),
        }
    }
}

impl Resources for AddOffsetsToTxnRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::TransactionalId => vec![self.transactional_id.as_str()],
            R::Group => vec![self.group_id.as_str()],
            _ => Vec::new(),
        }
    }
}

impl Resources for EndTxnRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::TransactionalId, &self.transactional_id)
    }
}

impl Resources for DescribeTransactionsRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::TransactionalId => self.transactional_ids.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        }
    }
}

impl Resources for ListTransactionsRequest {
    fn names(&self, _kind: ResourceType) -> Vec<&str> {
        Vec::new()
    }
}

impl Resources for AbortTransactionRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::TransactionalId, &self.transactional_id)
    }
}

impl Resources for CreateTopicRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Topic, &self.name)
    }
}

impl Resources for DeleteTopicRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Topic, &self.name)
    }
}

impl Resources for AlterTopicConfigRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Topic, &self.name)
    }
}

impl Resources for CreatePartitionsRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Topic, &self.name)
    }
}

impl Resources for ListTopicsRequest {
    fn names(&self, _kind: ResourceType) -> Vec<&str> {
        Vec::new()
    }
}

impl Resources for DescribeTopicRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Topic, &self.name)
    }
}

impl Resources for DescribeClusterRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Cluster, CLUSTER_RESOURCE)
    }
}

impl Resources for AdmitNodeRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Cluster, CLUSTER_RESOURCE)
    }
}

impl Resources for MetadataRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        topics(kind, self.topics.iter().map(String::as_str))
    }
}

impl Resources for FindCoordinatorRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match (kind, CoordinatorKind::try_from(self.kind)) {
            (R::Group, Ok(CoordinatorKind::Group)) => vec![self.key.as_str()],
            (R::TransactionalId, Ok(CoordinatorKind::Transaction)) => vec![self.key.as_str()],
            _ => Vec::new(),
        }
    }
}

impl Resources for ConsumerGroupHeartbeatRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::Group => vec![self.group_id.as_str()],
            R::Topic => self.subscribed_topics.iter().flat_map(|s| s.topics.iter().map(String::as_str)).collect(),
            _ => Vec::new(),
        }
    }
}

impl Resources for ListGroupsRequest {
    fn names(&self, _kind: ResourceType) -> Vec<&str> {
        Vec::new()
    }
}

impl Resources for DescribeGroupRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Group, &self.group_id)
    }
}

impl Resources for DeleteGroupRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        only(kind, R::Group, &self.group_id)
    }
}

impl Resources for DeleteOffsetsRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::Group => vec![self.group_id.as_str()],
            R::Topic => self.topics.iter().map(|t| t.topic.as_str()).collect(),
            _ => Vec::new(),
        }
    }
}

impl Resources for CommitOffsetsRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::Group => vec![self.group_id.as_str()],
            R::Topic => self.topics.iter().map(|t| t.topic.as_str()).collect(),
            _ => Vec::new(),
        }
    }
}

impl Resources for TxnCommitOffsetsRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::TransactionalId => vec![self.transactional_id.as_str()],
            R::Group => vec![self.group_id.as_str()],
            R::Topic => self.topics.iter().map(|t| t.topic.as_str()).collect(),
            _ => Vec::new(),
        }
    }
}

impl Resources for FetchOffsetsRequest {
    fn names(&self, kind: ResourceType) -> Vec<&str> {
        match kind {
            R::Group => vec![self.group_id.as_str()],
            R::Topic => self.topics.iter().map(|t| t.topic.as_str()).collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_public_rpc_has_exactly_one_rule_and_every_rule_a_public_rpc() {
        let rpcs = rill_proto::descriptor::rpcs().expect("the compiled descriptor set");
        let public: BTreeSet<String> = rpcs.iter().filter(|r| !r.internal).map(|r| r.path()).collect();
        assert!(public.len() >= 15, "descriptor lists only {} public RPCs", public.len());
        let missing: Vec<&String> = public.iter().filter(|p| rule(p).is_none()).collect();
        assert!(missing.is_empty(), "public RPCs without an authorization rule: {missing:?}");
        let ruled: Vec<&str> = RULES.iter().map(|r| r.rpc).collect();
        let stale: Vec<&&str> = ruled.iter().filter(|r| !public.contains(**r)).collect();
        assert!(stale.is_empty(), "rules for RPCs that are not public: {stale:?}");
        assert_eq!(ruled.iter().collect::<BTreeSet<_>>().len(), ruled.len(), "an RPC has two rules");
        for r in RULES {
            assert!(!r.needs.is_empty(), "{} needs nothing", r.rpc);
        }
    }

    /// Denies one (type, name, operation).
    struct Deny(ResourceType, &'static str, Operation);

    impl Authorizer for Deny {
        fn allows(&self, _p: &Principal, resource: &Resource, operation: Operation) -> bool {
            !(resource.kind == self.0 && resource.name == self.1 && operation == self.2)
        }
    }

    fn produce(topics: &[&str]) -> ProduceRequest {
        ProduceRequest {
            topics: topics
                .iter()
                .map(|t| rill_proto::records::TopicProduce { topic: t.to_string(), ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_request_naming_a_denied_resource_is_refused_with_that_resource() {
        let authz = Authorization::new(Arc::new(Deny(R::Topic, "secret", Op::Write)));
        let p = Principal::Anonymous;
        let rpc = "/rill.records.Records/Produce";
        assert_eq!(authz.check(&p, rpc, &produce(&["open", "also-open"])), Ok(()));
        let denied = authz.check(&p, rpc, &produce(&["open", "secret"])).unwrap_err();
        assert_eq!(denied.to_string(), "not authorized to Write Topic \"secret\"");
        // Reading it is a different operation.
        let fetch = FetchRequest {
            topics: vec![rill_proto::records::FetchTopic { topic: "secret".into(), ..Default::default() }],
            ..Default::default()
        };
        assert_eq!(authz.check(&p, "/rill.records.Records/Fetch", &fetch), Ok(()));
    }

    #[test]
    fn an_rpc_without_a_rule_is_refused_even_by_allow_all() {
        let authz = Authorization::default();
        assert_eq!(
            authz.check(&Principal::Anonymous, "/rill.admin.Admin/Unknown", &ListTopicsRequest::default()),
            Err(Denied::NoRule { rpc: "/rill.admin.Admin/Unknown".into() })
        );
    }

    #[test]
    fn producer_ids_need_the_transactional_id_or_idempotent_writes_on_the_cluster() {
        let rpc = "/rill.records.Records/InitProducerId";
        let p = Principal::Anonymous;
        let no_idempotence = Authorization::new(Arc::new(Deny(R::Cluster, CLUSTER_RESOURCE, Op::IdempotentWrite)));
        assert!(no_idempotence.check(&p, rpc, &InitProducerIdRequest::default()).is_err());
        let transactional = InitProducerIdRequest { transactional_id: "tx".into(), ..Default::default() };
        assert_eq!(no_idempotence.check(&p, rpc, &transactional), Ok(()));
        let no_tx = Authorization::new(Arc::new(Deny(R::TransactionalId, "tx", Op::Write)));
        assert!(no_tx.check(&p, rpc, &transactional).is_err());
    }

    #[test]
    fn listings_show_only_what_may_be_described() {
        let authz = Authorization::new(Arc::new(Deny(R::Topic, "hidden", Op::Describe)));
        let p = Principal::Anonymous;
        let rpc = "/rill.admin.Admin/ListTopics";
        assert!(authz.lists(&p, rpc, R::Topic, "shown"));
        assert!(!authz.lists(&p, rpc, R::Topic, "hidden"));
        assert!(!authz.lists(&p, "/rill.admin.Admin/Unknown", R::Topic, "shown"));
        // Groups and offsets: a commit names its group and its topics.
        let commit = CommitOffsetsRequest {
            group_id: "g".into(),
            topics: vec![rill_proto::groups::CommitTopic { topic: "hidden".into(), ..Default::default() }],
            ..Default::default()
        };
        assert_eq!(authz.check(&p, "/rill.groups.Groups/CommitOffsets", &commit), Ok(()), "Read, not Describe");
    }
}

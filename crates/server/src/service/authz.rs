//! The authorization model every listener shares: resources, operations, the [`Authorizer`], and
//! decisions made per resource.
//!
//! It is Kafka's ACL model, so that client authentication, ACLs and the Kafka listener plug in
//! here without touching the service functions:
//!
//! * a [`Resource`] is the cluster, a topic, a consumer group or a transactional id;
//! * an [`Operation`] is what is done to it (Kafka's operation names);
//! * each listener keeps a **rule table** saying, for each of its requests, which
//!   [`Need`]s — (resource type, operation) pairs — it has (gRPC's, keyed by RPC path, is
//!   `crate::api::rules`); the listener puts the request's rule into its
//!   [`RequestContext`] and refuses a request that has none;
//! * the service function decides **each resource the request touches** with
//!   [`Authorization::check`], and answers a denied one with its own authorization error while
//!   serving the rest (a produce to five topics, one of them denied, writes to four), as Kafka
//!   does; a listing shows only what [`Authorization::lists`] allows.
//!
//! Until clients authenticate every caller is anonymous and the node's authorizer is
//! [`AllowAll`].

use std::fmt;
use std::sync::Arc;

use super::context::{Principal, RequestContext};

/// The name the cluster resource goes by (Kafka's is `kafka-cluster`).
pub const CLUSTER_RESOURCE: &str = "rill-cluster";

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
    /// Change a topic's or a group's configuration.
    AlterConfigs,
    /// Read a topic's or a group's configuration.
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

/// One (resource type, operation) pair a request needs: every resource of that type it touches
/// must allow the operation.
pub type Need = (ResourceType, Operation);

/// What each operation needs, whichever listener it arrives on: each listener's rule table
/// points its requests here, so an operation cannot need one thing over gRPC and another over
/// Kafka's protocol. Kafka's own authorization of each request.
pub mod needs {
    use super::Need;
    use super::Operation as Op;
    use super::ResourceType as R;

    /// Produce: Write on each topic; with a transactional id, Write on it too.
    pub const PRODUCE: &[Need] = &[(R::Topic, Op::Write), (R::TransactionalId, Op::Write)];
    /// Fetch: Read on each topic.
    pub const FETCH: &[Need] = &[(R::Topic, Op::Read)];
    /// ListOffsets: Describe on each topic.
    pub const LIST_OFFSETS: &[Need] = &[(R::Topic, Op::Describe)];
    /// OffsetForLeaderEpoch: Describe on each topic.
    pub const OFFSET_FOR_LEADER_EPOCH: &[Need] = &[(R::Topic, Op::Describe)];
    /// InitProducerId: with a transactional id, Write on it; without, idempotent writes on the
    /// cluster.
    pub const INIT_PRODUCER_ID: &[Need] = &[(R::TransactionalId, Op::Write), (R::Cluster, Op::IdempotentWrite)];
    /// Metadata: Describe on each topic (a listing shows only those).
    pub const METADATA: &[Need] = &[(R::Topic, Op::Describe)];
    /// CreateTopics: Create on each topic.
    pub const CREATE_TOPICS: &[Need] = &[(R::Topic, Op::Create)];
    /// DeleteTopics: Delete on each topic.
    pub const DELETE_TOPICS: &[Need] = &[(R::Topic, Op::Delete)];
    /// CreatePartitions: Alter on each topic.
    pub const CREATE_PARTITIONS: &[Need] = &[(R::Topic, Op::Alter)];
    /// DescribeConfigs: DescribeConfigs on each topic.
    pub const DESCRIBE_CONFIGS: &[Need] = &[(R::Topic, Op::DescribeConfigs)];
    /// AlterConfigs and IncrementalAlterConfigs: AlterConfigs on each topic.
    pub const ALTER_CONFIGS: &[Need] = &[(R::Topic, Op::AlterConfigs)];
    /// DescribeCluster: Describe on the cluster.
    pub const DESCRIBE_CLUSTER: &[Need] = &[(R::Cluster, Op::Describe)];
    /// FindCoordinator: Describe on the group or the transactional id.
    pub const FIND_COORDINATOR: &[Need] = &[(R::Group, Op::Describe), (R::TransactionalId, Op::Describe)];
    /// The classic protocol's JoinGroup, SyncGroup, Heartbeat and LeaveGroup: Read on the group.
    pub const CLASSIC_MEMBERSHIP: &[Need] = &[(R::Group, Op::Read)];
    /// ListGroups and DescribeGroups: Describe on each group (listings filtered).
    pub const DESCRIBE_GROUPS: &[Need] = &[(R::Group, Op::Describe)];
    /// OffsetCommit: Read on the group and on each topic.
    pub const COMMIT_OFFSETS: &[Need] = &[(R::Group, Op::Read), (R::Topic, Op::Read)];
    /// OffsetFetch: Describe on the group and on each topic.
    pub const FETCH_OFFSETS: &[Need] = &[(R::Group, Op::Describe), (R::Topic, Op::Describe)];
    /// ConsumerGroupHeartbeat (KIP-848): Read on the group, Describe on each subscribed topic.
    pub const CONSUMER_GROUP_HEARTBEAT: &[Need] = &[(R::Group, Op::Read), (R::Topic, Op::Describe)];
    /// ConsumerGroupDescribe (KIP-848): Describe on each group, and on each topic its members'
    /// subscriptions and assignments name (a topic the caller may not describe is left out).
    pub const CONSUMER_GROUP_DESCRIBE: &[Need] = &[(R::Group, Op::Describe), (R::Topic, Op::Describe)];
    /// DeleteRecords: Delete on each topic.
    pub const DELETE_RECORDS: &[Need] = &[(R::Topic, Op::Delete)];
    /// DeleteGroups: Delete on each group.
    pub const DELETE_GROUPS: &[Need] = &[(R::Group, Op::Delete)];
    /// OffsetDelete: Delete on the group, Read on each topic.
    pub const DELETE_OFFSETS: &[Need] = &[(R::Group, Op::Delete), (R::Topic, Op::Read)];
    /// AddPartitionsToTxn: Write on the transactional id and on each topic.
    pub const ADD_PARTITIONS_TO_TXN: &[Need] = &[(R::TransactionalId, Op::Write), (R::Topic, Op::Write)];
    /// AddOffsetsToTxn: Write on the transactional id, Read on the group.
    pub const ADD_OFFSETS_TO_TXN: &[Need] = &[(R::TransactionalId, Op::Write), (R::Group, Op::Read)];
    /// TxnOffsetCommit: Write on the transactional id, Read on the group and on each topic.
    pub const TXN_COMMIT_OFFSETS: &[Need] =
        &[(R::TransactionalId, Op::Write), (R::Group, Op::Read), (R::Topic, Op::Read)];
    /// EndTxn: Write on the transactional id.
    pub const END_TXN: &[Need] = &[(R::TransactionalId, Op::Write)];
    /// DescribeTransactions and ListTransactions: Describe on each transactional id (listings
    /// filtered).
    pub const DESCRIBE_TRANSACTIONS: &[Need] = &[(R::TransactionalId, Op::Describe)];
    /// ShareFetch and ShareAcknowledge (KIP-932): Read on the group and on each topic.
    pub const SHARE_FETCH: &[Need] = &[(R::Group, Op::Read), (R::Topic, Op::Read)];
    /// IncrementalAlterConfigs on a group: AlterConfigs on it.
    pub const ALTER_GROUP_CONFIGS: &[Need] = &[(R::Group, Op::AlterConfigs)];
    /// DescribeConfigs on a group: DescribeConfigs on it.
    pub const DESCRIBE_GROUP_CONFIGS: &[Need] = &[(R::Group, Op::DescribeConfigs)];
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

/// A resource the principal may not use for what the request does with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{principal} is not authorized to {operation:?} {resource}")]
pub struct Denied {
    /// Who asked.
    pub principal: Principal,
    /// The resource.
    pub resource: Resource,
    /// The operation refused.
    pub operation: Operation,
}

impl Denied {
    /// The refusal that answers the entries about the denied resource: Kafka's
    /// `*_AUTHORIZATION_FAILED` code of its type.
    pub fn refusal(&self) -> crate::errors::Refusal {
        use rill_proto::common::ErrorCode;
        let code = match self.resource.kind {
            ResourceType::Topic => ErrorCode::TopicAuthorizationFailed,
            ResourceType::Group => ErrorCode::GroupAuthorizationFailed,
            ResourceType::Cluster => ErrorCode::ClusterAuthorizationFailed,
            ResourceType::TransactionalId => ErrorCode::TransactionalIdAuthorizationFailed,
        };
        crate::errors::not_authorized(code, self.to_string())
    }
}

/// The node's authorization: one authorizer, consulted by every service function.
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

    /// `Ok` when the request of `ctx` may touch `name` of type `kind`: its caller is allowed every
    /// operation its rule needs on that type. A request whose rule names no need of `kind` may
    /// not touch such a resource at all (deny by default: a listener's rule that forgot a type
    /// refuses, never allows).
    pub fn check(&self, ctx: &RequestContext, kind: ResourceType, name: &str) -> Result<(), Denied> {
        let resource = Resource { kind, name: name.to_string() };
        let denied = |resource, operation| Denied { principal: ctx.principal.clone(), resource, operation };
        let mut named = false;
        for &(_, operation) in ctx.needs.iter().filter(|(k, _)| *k == kind) {
            named = true;
            if !self.authorizer.allows(&ctx.principal, &resource, operation) {
                return Err(denied(resource, operation));
            }
        }
        if named {
            Ok(())
        } else {
            // No need of this type in the rule: refused as the least the request could mean.
            Err(denied(resource, Operation::Describe))
        }
    }

    /// True when an answer that lists resources of `kind` may list `name` (Kafka's `Metadata`
    /// for all topics, `ListGroups`): the same decision as [`Self::check`], as a filter.
    pub fn lists(&self, ctx: &RequestContext, kind: ResourceType, name: &str) -> bool {
        self.check(ctx, kind, name).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::context::Listener;

    /// Denies one (type, name, operation).
    struct Deny(ResourceType, &'static str, Operation);

    impl Authorizer for Deny {
        fn allows(&self, _p: &Principal, resource: &Resource, operation: Operation) -> bool {
            !(resource.kind == self.0 && resource.name == self.1 && operation == self.2)
        }
    }

    const PRODUCE: &[Need] = &[(ResourceType::Topic, Operation::Write)];
    const DESCRIBE_TOPIC: &[Need] =
        &[(ResourceType::Topic, Operation::Describe), (ResourceType::Topic, Operation::DescribeConfigs)];

    #[test]
    fn each_resource_is_decided_on_its_own() {
        let authz = Authorization::new(Arc::new(Deny(ResourceType::Topic, "secret", Operation::Write)));
        let ctx = RequestContext::anonymous(Listener::Grpc, PRODUCE);
        assert_eq!(authz.check(&ctx, ResourceType::Topic, "open"), Ok(()));
        let denied = authz.check(&ctx, ResourceType::Topic, "secret").unwrap_err();
        assert_eq!(denied.to_string(), "User:ANONYMOUS is not authorized to Write Topic \"secret\"");
        assert!(authz.lists(&ctx, ResourceType::Topic, "open"));
        assert!(!authz.lists(&ctx, ResourceType::Topic, "secret"));
    }

    #[test]
    fn every_operation_the_rule_needs_on_the_type_must_be_allowed() {
        let authz = Authorization::new(Arc::new(Deny(ResourceType::Topic, "t", Operation::DescribeConfigs)));
        let ctx = RequestContext::anonymous(Listener::Grpc, DESCRIBE_TOPIC);
        let denied = authz.check(&ctx, ResourceType::Topic, "t").unwrap_err();
        assert_eq!(denied.operation, Operation::DescribeConfigs);
        // Reading it is another request's operation.
        let fetch = RequestContext::anonymous(Listener::Grpc, &[(ResourceType::Topic, Operation::Read)]);
        assert_eq!(authz.check(&fetch, ResourceType::Topic, "t"), Ok(()));
    }

    #[test]
    fn a_type_the_rule_does_not_name_is_refused_even_by_allow_all() {
        let authz = Authorization::default();
        let ctx = RequestContext::anonymous(Listener::Grpc, PRODUCE);
        assert!(authz.check(&ctx, ResourceType::Group, "g").is_err());
        assert!(authz.check(&ctx, ResourceType::Topic, "t").is_ok());
    }
}

//! The gRPC listener's rule table: every public RPC mapped to the (resource type, operation)
//! pairs it needs, and the [`RequestContext`] a handler builds from its request.
//!
//! The service layer decides each resource a request touches against the rule the context
//! carries ([`crate::service::authz`]); this table only says what each RPC needs — Kafka's
//! mapping where Kafka has the request. An RPC with no rule is refused before its handler works
//! (deny by default), and a test over the compiled descriptor set fails when a public RPC has
//! no rule, so no RPC can be added to the public services without stating what it needs.

use crate::service::authz::{needs, Need, Operation, ResourceType};
use crate::service::context::kept_client_id;
use crate::service::{Listener, Principal, RequestContext};

/// The gRPC metadata key a client may name itself by (Kafka's `client.id`): shown where Rill
/// records who called (a consumer group member's description). Optional; ASCII.
pub const CLIENT_ID_HEADER: &str = "rill-client-id";

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
    /// `/rill.groups.Groups/JoinGroup`.
    pub const JOIN_GROUP: &str = "/rill.groups.Groups/JoinGroup";
    /// `/rill.groups.Groups/SyncGroup`.
    pub const SYNC_GROUP: &str = "/rill.groups.Groups/SyncGroup";
    /// `/rill.groups.Groups/GroupHeartbeat`.
    pub const GROUP_HEARTBEAT: &str = "/rill.groups.Groups/GroupHeartbeat";
    /// `/rill.groups.Groups/LeaveGroup`.
    pub const LEAVE_GROUP: &str = "/rill.groups.Groups/LeaveGroup";
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
    /// `/rill.share.Share/ShareFetch`.
    pub const SHARE_FETCH: &str = "/rill.share.Share/ShareFetch";
    /// `/rill.share.Share/ShareAcknowledge`.
    pub const SHARE_ACKNOWLEDGE: &str = "/rill.share.Share/ShareAcknowledge";
    /// `/rill.share.Share/AlterShareGroupConfig`.
    pub const ALTER_SHARE_GROUP_CONFIG: &str = "/rill.share.Share/AlterShareGroupConfig";
    /// `/rill.share.Share/DescribeShareGroupConfig`.
    pub const DESCRIBE_SHARE_GROUP_CONFIG: &str = "/rill.share.Share/DescribeShareGroupConfig";
    /// `/rill.share.Share/DescribeShareGroup`.
    pub const DESCRIBE_SHARE_GROUP: &str = "/rill.share.Share/DescribeShareGroup";
    /// `/rill.share.Share/ListShareGroups`.
    pub const LIST_SHARE_GROUPS: &str = "/rill.share.Share/ListShareGroups";
}

use Operation as Op;
use ResourceType as R;

/// What one RPC needs.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The gRPC path, `/package.Service/Method`.
    pub rpc: &'static str,
    /// Each (resource type, operation) the RPC needs.
    pub needs: &'static [Need],
}

/// Every public RPC and what it needs. Kafka's mapping where Kafka has the request.
pub const RULES: &[Rule] = &[
    Rule { rpc: rpc::PRODUCE, needs: needs::PRODUCE },
    Rule { rpc: rpc::FETCH, needs: needs::FETCH },
    Rule { rpc: rpc::LIST_OFFSETS, needs: needs::LIST_OFFSETS },
    Rule { rpc: rpc::INIT_PRODUCER_ID, needs: needs::INIT_PRODUCER_ID },
    Rule { rpc: rpc::CREATE_TOPIC, needs: needs::CREATE_TOPICS },
    Rule { rpc: rpc::DELETE_TOPIC, needs: needs::DELETE_TOPICS },
    Rule { rpc: rpc::ALTER_TOPIC_CONFIG, needs: needs::ALTER_CONFIGS },
    Rule { rpc: rpc::CREATE_PARTITIONS, needs: needs::CREATE_PARTITIONS },
    Rule { rpc: rpc::LIST_TOPICS, needs: &[(R::Topic, Op::Describe)] },
    Rule { rpc: rpc::DESCRIBE_TOPIC, needs: &[(R::Topic, Op::Describe), (R::Topic, Op::DescribeConfigs)] },
    Rule { rpc: rpc::DESCRIBE_CLUSTER, needs: needs::DESCRIBE_CLUSTER },
    Rule { rpc: rpc::METADATA, needs: needs::METADATA },
    Rule { rpc: rpc::FIND_COORDINATOR, needs: needs::FIND_COORDINATOR },
    // Admitting a node changes the cluster's membership.
    Rule { rpc: rpc::ADMIT_NODE, needs: &[(R::Cluster, Op::Alter)] },
    // Kafka's DeleteRecords needs Delete on the topic.
    Rule { rpc: rpc::DELETE_RECORDS, needs: needs::DELETE_RECORDS },
    // Kafka's ConsumerGroupHeartbeat: Read on the group; Describe on each subscribed topic.
    Rule { rpc: rpc::CONSUMER_GROUP_HEARTBEAT, needs: needs::CONSUMER_GROUP_HEARTBEAT },
    // Kafka's JoinGroup, SyncGroup, Heartbeat and LeaveGroup: Read on the group.
    Rule { rpc: rpc::JOIN_GROUP, needs: needs::CLASSIC_MEMBERSHIP },
    Rule { rpc: rpc::SYNC_GROUP, needs: needs::CLASSIC_MEMBERSHIP },
    Rule { rpc: rpc::GROUP_HEARTBEAT, needs: needs::CLASSIC_MEMBERSHIP },
    Rule { rpc: rpc::LEAVE_GROUP, needs: needs::CLASSIC_MEMBERSHIP },
    // Kafka's ListGroups and DescribeGroups: Describe on each group (listings filtered).
    Rule { rpc: rpc::LIST_GROUPS, needs: needs::DESCRIBE_GROUPS },
    Rule { rpc: rpc::DESCRIBE_GROUP, needs: needs::DESCRIBE_GROUPS },
    // Kafka's DeleteGroups: Delete on the group; OffsetDelete: Delete on the group, Read on each topic.
    Rule { rpc: rpc::DELETE_GROUP, needs: needs::DELETE_GROUPS },
    Rule { rpc: rpc::DELETE_OFFSETS, needs: needs::DELETE_OFFSETS },
    Rule { rpc: rpc::COMMIT_OFFSETS, needs: needs::COMMIT_OFFSETS },
    Rule { rpc: rpc::FETCH_OFFSETS, needs: needs::FETCH_OFFSETS },
    // Kafka's AddPartitionsToTxn: Write on the transactional id and on each topic.
    Rule { rpc: rpc::ADD_PARTITIONS_TO_TXN, needs: needs::ADD_PARTITIONS_TO_TXN },
    // Kafka's AddOffsetsToTxn: Write on the transactional id, Read on the group.
    Rule { rpc: rpc::ADD_OFFSETS_TO_TXN, needs: needs::ADD_OFFSETS_TO_TXN },
    // Kafka's TxnOffsetCommit: Write on the transactional id, Read on the group and each topic.
    Rule { rpc: rpc::TXN_COMMIT_OFFSETS, needs: needs::TXN_COMMIT_OFFSETS },
    // Kafka's EndTxn: Write on the transactional id.
    Rule { rpc: rpc::END_TXN, needs: needs::END_TXN },
    // Kafka's DescribeTransactions: Describe on each transactional id.
    Rule { rpc: rpc::DESCRIBE_TRANSACTIONS, needs: needs::DESCRIBE_TRANSACTIONS },
    // Kafka's ListTransactions: lists only ids the caller may Describe.
    Rule { rpc: rpc::LIST_TRANSACTIONS, needs: needs::DESCRIBE_TRANSACTIONS },
    // Aborting another producer's transaction writes to the id (and fences its producer).
    Rule { rpc: rpc::ABORT_TRANSACTION, needs: &[(R::TransactionalId, Op::Write)] },
    // Kafka's ShareFetch and ShareAcknowledge: Read on the group and on each topic.
    Rule { rpc: rpc::SHARE_FETCH, needs: needs::SHARE_FETCH },
    Rule { rpc: rpc::SHARE_ACKNOWLEDGE, needs: needs::SHARE_FETCH },
    // Kafka's IncrementalAlterConfigs and DescribeConfigs on a GROUP resource.
    Rule { rpc: rpc::ALTER_SHARE_GROUP_CONFIG, needs: needs::ALTER_GROUP_CONFIGS },
    Rule { rpc: rpc::DESCRIBE_SHARE_GROUP_CONFIG, needs: needs::DESCRIBE_GROUP_CONFIGS },
    // Kafka's ShareGroupDescribe and DescribeShareGroupOffsets; ListGroups.
    Rule { rpc: rpc::DESCRIBE_SHARE_GROUP, needs: needs::CONSUMER_GROUP_DESCRIBE },
    Rule { rpc: rpc::LIST_SHARE_GROUPS, needs: needs::DESCRIBE_GROUPS },
];

/// The rule of RPC `rpc` (a gRPC path), if it has one.
pub fn rule(rpc: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.rpc == rpc)
}

/// The context of a public request to RPC `rpc`: its caller (anonymous until clients
/// authenticate), the client id it gives in [`CLIENT_ID_HEADER`], the address it came from, and
/// the RPC's rule. An RPC without a rule is refused (`PERMISSION_DENIED`).
pub fn context<T>(request: &tonic::Request<T>, rpc: &str) -> Result<RequestContext, tonic::Status> {
    let Some(rule) = rule(rpc) else {
        return Err(tonic::Status::permission_denied(format!("{rpc} has no authorization rule")));
    };
    let client_id =
        request.metadata().get(CLIENT_ID_HEADER).and_then(|v| v.to_str().ok()).map(kept_client_id).unwrap_or_default();
    Ok(RequestContext {
        principal: Principal::Anonymous,
        client_id,
        client_host: request.remote_addr().map(|a| a.ip().to_string()).unwrap_or_default(),
        listener: Listener::Grpc,
        needs: rule.needs,
    })
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

    #[test]
    fn a_context_carries_the_rule_the_caller_and_its_client_id() {
        let mut request = tonic::Request::new(());
        request.metadata_mut().insert(CLIENT_ID_HEADER, "billing-7".parse().unwrap());
        let ctx = context(&request, rpc::PRODUCE).unwrap();
        assert_eq!(ctx.principal, Principal::Anonymous);
        assert_eq!(ctx.client_id, "billing-7");
        assert_eq!(ctx.listener, Listener::Grpc);
        assert_eq!(ctx.needs, rule(rpc::PRODUCE).unwrap().needs);
        let refused = context(&request, "/rill.admin.Admin/Unknown").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        let long = "é".repeat(200);
        assert_eq!(kept_client_id(&long).len(), 254, "cut at a character boundary");
    }
}

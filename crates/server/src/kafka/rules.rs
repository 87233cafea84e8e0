//! The Kafka listener's rule table: what each API needs, keyed by API key (Kafka's own
//! authorization of each request), and the [`RequestContext`] a request carries.
//!
//! An API with no rule is answered by nobody: [`super::dispatch`] serves only APIs with a rule
//! and a supported version range, and a test checks that every supported API has a rule.

use kafka_protocol::messages::ApiKey;

use crate::service::authz::{needs, Need};
use crate::service::context::kept_client_id;
use crate::service::{Listener, Principal, RequestContext};

/// What `api` needs; `None` for an API without a rule.
pub fn needs(api: ApiKey) -> Option<&'static [Need]> {
    Some(match api {
        // Before authentication, as in Kafka: every client may learn the versions.
        ApiKey::ApiVersions => &[],
        // Auto-creation checks Create on each topic it creates (Service::auto_create_topics).
        ApiKey::Metadata => needs::METADATA,
        ApiKey::Produce => needs::PRODUCE,
        ApiKey::Fetch => needs::FETCH,
        ApiKey::ListOffsets => needs::LIST_OFFSETS,
        ApiKey::OffsetForLeaderEpoch => needs::OFFSET_FOR_LEADER_EPOCH,
        ApiKey::InitProducerId => needs::INIT_PRODUCER_ID,
        ApiKey::FindCoordinator => needs::FIND_COORDINATOR,
        ApiKey::JoinGroup | ApiKey::SyncGroup | ApiKey::Heartbeat | ApiKey::LeaveGroup => needs::CLASSIC_MEMBERSHIP,
        ApiKey::OffsetCommit => needs::COMMIT_OFFSETS,
        ApiKey::OffsetFetch => needs::FETCH_OFFSETS,
        ApiKey::ListGroups | ApiKey::DescribeGroups => needs::DESCRIBE_GROUPS,
        ApiKey::CreateTopics => needs::CREATE_TOPICS,
        ApiKey::DeleteTopics => needs::DELETE_TOPICS,
        ApiKey::CreatePartitions => needs::CREATE_PARTITIONS,
        ApiKey::DescribeCluster => needs::DESCRIBE_CLUSTER,
        ApiKey::DescribeConfigs => needs::DESCRIBE_CONFIGS,
        ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs => needs::ALTER_CONFIGS,
        ApiKey::ConsumerGroupHeartbeat => needs::CONSUMER_GROUP_HEARTBEAT,
        ApiKey::ConsumerGroupDescribe => needs::CONSUMER_GROUP_DESCRIBE,
        ApiKey::DeleteRecords => needs::DELETE_RECORDS,
        ApiKey::DeleteGroups => needs::DELETE_GROUPS,
        ApiKey::OffsetDelete => needs::DELETE_OFFSETS,
        ApiKey::AddPartitionsToTxn => needs::ADD_PARTITIONS_TO_TXN,
        ApiKey::AddOffsetsToTxn => needs::ADD_OFFSETS_TO_TXN,
        ApiKey::TxnOffsetCommit => needs::TXN_COMMIT_OFFSETS,
        ApiKey::EndTxn => needs::END_TXN,
        ApiKey::DescribeTransactions | ApiKey::ListTransactions => needs::DESCRIBE_TRANSACTIONS,
        _ => return None,
    })
}

/// The context of one request on a connection from `client_host`, by `principal`, naming
/// itself `client_id` (kept by [`kept_client_id`]).
pub fn context(
    principal: &Principal,
    client_host: &str,
    client_id: Option<&str>,
    needs: &'static [Need],
) -> RequestContext {
    RequestContext {
        principal: principal.clone(),
        client_id: kept_client_id(client_id.unwrap_or_default()),
        client_host: client_host.to_string(),
        listener: Listener::Kafka,
        needs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::versions::SUPPORTED;
    use crate::service::context::MAX_CLIENT_ID_BYTES;

    #[test]
    fn every_supported_api_has_a_rule() {
        for s in SUPPORTED {
            assert!(needs(s.api).is_some(), "{:?} is advertised without a rule", s.api);
        }
    }

    #[test]
    fn a_long_client_id_is_cut_on_a_character_boundary() {
        let long = "é".repeat(200);
        let ctx = context(&Principal::Anonymous, "10.0.0.1", Some(&long), &[]);
        assert!(ctx.client_id.len() <= MAX_CLIENT_ID_BYTES && ctx.client_id.chars().all(|c| c == 'é'));
        assert_eq!(ctx.listener, Listener::Kafka);
    }
}

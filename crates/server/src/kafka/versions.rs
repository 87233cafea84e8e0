//! The APIs and versions the Kafka listener answers, and `ApiVersions`, the request every Kafka
//! client sends first to learn them.
//!
//! Only what is implemented is advertised: a client picks, for each API, the highest version
//! both sides support, and refuses to use an API the broker does not list. A request at a
//! version outside its range closes the connection (Kafka's brokers do the same), except
//! `ApiVersions` itself, which KIP-511 answers at version 0 with `UNSUPPORTED_VERSION` and the
//! supported ranges, so a newer client can retry at a version this listener knows.

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;

/// Kafka's `UNSUPPORTED_VERSION`.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// Kafka's `INVALID_REQUEST`.
pub const INVALID_REQUEST: i16 = 42;

/// One API the listener answers, with the versions it decodes and encodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supported {
    /// The API.
    pub api: ApiKey,
    /// The lowest version answered.
    pub min: i16,
    /// The highest.
    pub max: i16,
}

/// Every API the listener answers. Each range lies within the versions the `kafka-protocol`
/// crate encodes (a test checks), and every version in it is tested to round-trip.
///
/// `Produce` is advertised from version 0 though versions 0 to 2 are refused (the connection
/// is closed; [`PRODUCE_MIN_ANSWERED`]), the exception Apache Kafka 4.0 makes too
/// (KAFKA-18659): librdkafka before 2.11.1 (Debian's kcat links 2.0.2) stops compressing when
/// a broker's lowest `Produce` version is above 2. A client that sees version 3 supported sends
/// version 3 or later (record batches, which every compression codec needs).
pub const SUPPORTED: &[Supported] = &[
    Supported { api: ApiKey::Produce, min: 0, max: 12 },
    Supported { api: ApiKey::Fetch, min: 4, max: 17 },
    Supported { api: ApiKey::ListOffsets, min: 1, max: 8 },
    Supported { api: ApiKey::OffsetForLeaderEpoch, min: 2, max: 4 },
    Supported { api: ApiKey::Metadata, min: 0, max: 13 },
    Supported { api: ApiKey::OffsetCommit, min: 2, max: 9 },
    Supported { api: ApiKey::OffsetFetch, min: 1, max: 9 },
    Supported { api: ApiKey::FindCoordinator, min: 0, max: 4 },
    Supported { api: ApiKey::JoinGroup, min: 0, max: 9 },
    Supported { api: ApiKey::Heartbeat, min: 0, max: 4 },
    Supported { api: ApiKey::LeaveGroup, min: 0, max: 5 },
    Supported { api: ApiKey::DescribeGroups, min: 0, max: 6 },
    Supported { api: ApiKey::ListGroups, min: 0, max: 5 },
    Supported { api: ApiKey::SyncGroup, min: 0, max: 5 },
    Supported { api: ApiKey::ApiVersions, min: 0, max: 4 },
    Supported { api: ApiKey::CreateTopics, min: 2, max: 7 },
    Supported { api: ApiKey::DeleteTopics, min: 1, max: 6 },
    Supported { api: ApiKey::InitProducerId, min: 0, max: 4 },
    Supported { api: ApiKey::CreatePartitions, min: 0, max: 3 },
    Supported { api: ApiKey::DescribeCluster, min: 0, max: 1 },
    Supported { api: ApiKey::DescribeConfigs, min: 1, max: 4 },
    Supported { api: ApiKey::AlterConfigs, min: 0, max: 2 },
    Supported { api: ApiKey::IncrementalAlterConfigs, min: 0, max: 1 },
    Supported { api: ApiKey::ConsumerGroupHeartbeat, min: 0, max: 1 },
    Supported { api: ApiKey::ConsumerGroupDescribe, min: 0, max: 1 },
    Supported { api: ApiKey::DeleteRecords, min: 0, max: 2 },
    Supported { api: ApiKey::DeleteGroups, min: 0, max: 2 },
    Supported { api: ApiKey::OffsetDelete, min: 0, max: 0 },
    // Transactions: `Produce` v12, `EndTxn` v5 and `TxnOffsetCommit` v5 are protocol version 2
    // (kafka::transactions).
    Supported { api: ApiKey::AddPartitionsToTxn, min: 0, max: 3 },
    Supported { api: ApiKey::AddOffsetsToTxn, min: 0, max: 4 },
    Supported { api: ApiKey::EndTxn, min: 0, max: 5 },
    Supported { api: ApiKey::TxnOffsetCommit, min: 0, max: 5 },
    Supported { api: ApiKey::DescribeTransactions, min: 0, max: 0 },
    Supported { api: ApiKey::ListTransactions, min: 0, max: 1 },
];

/// The lowest `Produce` version answered (the codecs' lowest).
pub const PRODUCE_MIN_ANSWERED: i16 = 3;

/// A feature (KIP-584) the listener reports: its name and the levels it supports, of which the
/// highest is the one finalized — each stands for versions advertised in [`SUPPORTED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// Its name.
    pub name: &'static str,
    /// The lowest level supported.
    pub min: i16,
    /// The highest, and the one finalized.
    pub level: i16,
}

/// The features `ApiVersions` reports.
///
/// * `group.version` 1: the consumer group protocol of KIP-848 (`ConsumerGroupHeartbeat`,
///   `ConsumerGroupDescribe`) is served.
/// * `transaction.version` 2: a client that reads it (the Java client from 4.0) speaks
///   transactions v2 — `Produce` v12 adds partitions, `TxnOffsetCommit` v5 the group, `EndTxn`
///   v5 answers the bumped epoch; below it v1. librdkafka and kafka-python do not read it and
///   speak v1.
pub const FEATURES: &[Feature] =
    &[Feature { name: "group.version", min: 0, level: 1 }, Feature { name: "transaction.version", min: 0, level: 2 }];

/// The versions of `api` the listener answers, if it answers it at all.
pub fn supported(api: ApiKey) -> Option<Supported> {
    SUPPORTED.iter().copied().find(|s| s.api == api)
}

/// The `ApiVersions` answer with `error_code`: every supported API and its versions, without
/// features (KIP-511's answer to a version this listener does not know).
pub fn api_versions_answer(error_code: i16) -> ApiVersionsResponse {
    let api_keys = SUPPORTED
        .iter()
        .map(|s| ApiVersion::default().with_api_key(s.api as i16).with_min_version(s.min).with_max_version(s.max))
        .collect();
    ApiVersionsResponse::default().with_error_code(error_code).with_api_keys(api_keys)
}

/// The answer to an `ApiVersions` request: from v3 the client names its software, which must
/// match Kafka's pattern (letters and digits, with `.` and `-` inside), else `INVALID_REQUEST`.
///
/// From v3 it carries the [`FEATURES`], each finalized at its highest level, under
/// `features_epoch` (the node's metadata version, which only grows, so a client that asks
/// several nodes keeps the newest answer as Kafka's metadata offset lets it). A supported range
/// starting at 0 cannot be read by clients before KIP-1022: as Kafka does (KAFKA-17492), such a
/// range is left out below v4.
pub fn api_versions(request: &ApiVersionsRequest, version: i16, features_epoch: i64) -> ApiVersionsResponse {
    let valid = version < 3
        || (software_token(&request.client_software_name) && software_token(&request.client_software_version));
    if !valid {
        return api_versions_answer(INVALID_REQUEST);
    }
    let name = |f: &Feature| StrBytes::from_static_str(f.name);
    let supported = FEATURES
        .iter()
        .filter(|f| version >= 4 || f.min > 0)
        .map(|f| SupportedFeatureKey::default().with_name(name(f)).with_min_version(f.min).with_max_version(f.level))
        .collect();
    let finalized = FEATURES
        .iter()
        .map(|f| {
            FinalizedFeatureKey::default()
                .with_name(name(f))
                .with_min_version_level(f.level)
                .with_max_version_level(f.level)
        })
        .collect();
    api_versions_answer(0)
        .with_supported_features(supported)
        .with_finalized_features_epoch(features_epoch)
        .with_finalized_features(finalized)
}

/// Kafka's rule for a client software name or version: `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn software_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: &u8| b.is_ascii_alphanumeric();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.';
    match bytes {
        [] => false,
        [only] => edge(only),
        [first, middle @ .., last] => edge(first) && edge(last) && middle.iter().all(inner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_one_the_codecs_encode() {
        for s in SUPPORTED {
            let codec = s.api.valid_versions();
            assert!(s.min <= s.max, "{s:?}");
            // Produce is the one exception Kafka makes (KAFKA-18659): advertised from v0.
            let min = if s.api == ApiKey::Produce { codec.min.min(0) } else { codec.min };
            assert!(min <= s.min && s.max <= codec.max, "{s:?} outside {codec:?}");
        }
        let mut apis: Vec<i16> = SUPPORTED.iter().map(|s| s.api as i16).collect();
        apis.dedup();
        assert_eq!(apis.len(), SUPPORTED.len(), "each API once");
    }

    #[test]
    fn client_software_names_follow_kafkas_pattern() {
        for good in ["librdkafka", "2.0.2", "kafka-python", "a", "apache-kafka-java"] {
            assert!(software_token(good), "{good}");
        }
        for bad in ["", "-x", "x-", "x y", "é", ".5"] {
            assert!(!software_token(bad), "{bad:?}");
        }
    }
}

//! The Kafka wire-protocol listener (`kafka-listen`): Kafka's own clients — librdkafka and
//! everything built on it, kafka-python, kcat — reach the same service layer the gRPC listener
//! calls, with no client of Rill's in between.
//!
//! ```text
//!   TCP ─► connection ─► frame: length ≤ [kafka] max-request-bytes, bytes from the node's budget
//!                          │
//!                          ├► header: API key known? version supported? (else the connection closes,
//!                          │          but for ApiVersions, which KIP-511 answers)
//!                          ├► dispatch: decode (kafka-protocol) ─► one service call ─► encode
//!                          └► answer written, then the next request is read (one at a time, in order)
//! ```
//!
//! * [`frame`]: reading one request frame within the node's limits, and parsing its header.
//! * [`versions`]: the APIs and versions this listener answers, and the `ApiVersions` answer.
//! * [`rules`]: the Kafka listener's rule table (API key → what the request needs).
//! * [`dispatch`]: a frame parsed and decoded, then its API's handler: one service call,
//!   encoded.
//! * [`cluster`]: the cluster-level APIs (`Metadata`).
//! * [`admin`]: the admin APIs (`CreateTopics`, `DeleteTopics`, `CreatePartitions`,
//!   `DescribeCluster`, `DescribeConfigs`, `AlterConfigs`, `IncrementalAlterConfigs`).
//! * [`records`]: the data APIs (`Produce`, `Fetch`, `ListOffsets`, `InitProducerId`,
//!   `DeleteRecords`).
//! * [`groups`]: the classic consumer-group APIs (`FindCoordinator`, `JoinGroup`, `SyncGroup`,
//!   `Heartbeat`, `LeaveGroup`, `OffsetCommit`, `OffsetFetch`, `ListGroups`, `DescribeGroups`,
//!   `DeleteGroups`, `OffsetDelete`).
//! * [`consumer`]: Kafka's consumer group protocol (KIP-848, `ConsumerGroupHeartbeat`,
//!   `ConsumerGroupDescribe`).
//! * [`wire`]: conversions between Kafka's wire values and the service layer's.
//! * [`transactions`]: the transaction APIs (`AddPartitionsToTxn`, `AddOffsetsToTxn`, `EndTxn`,
//!   `TxnOffsetCommit`, `DescribeTransactions`, `ListTransactions`), transaction protocol 1.
//! * [`errors`]: the listener's one mapping from the service layer's refusals to Kafka's codes.
//! * [`connection`]: one client connection, and the accept loop that shares the node's limits.
//!
//! Every message comes from the `kafka-protocol` crate's generated codecs (a patched copy whose
//! decoders never reserve memory for more elements than a frame's bytes could hold:
//! `vendor/kafka-protocol/RILL.md`). What is supported, and every known difference from Apache
//! Kafka, is in docs/kafka.md.

pub mod admin;
pub mod cluster;
#[cfg(not(madsim))]
pub mod connection;
pub mod consumer;
pub mod dispatch;
pub mod errors;
pub mod frame;
pub mod groups;
pub mod records;
pub mod rules;
pub mod transactions;
pub mod versions;
pub mod wire;

#[cfg(test)]
mod tests;

//! The Rust client for Rill.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rill_client::Error> {
//! use std::time::Duration;
//! use rill_client::{Client, Consumer, ConsumerConfig, Producer, ProducerConfig, Record, TopicPartition};
//!
//! let client = Client::connect(&["127.0.0.1:7001".to_string()]).await?;
//! client.create_topic("orders", 3, 3, &[]).await?;
//!
//! let producer = Producer::new(client.clone(), ProducerConfig::default());
//! let delivery = producer.send("orders", Record::keyed("customer-7", "placed")).await?;
//! let landed = delivery.await?; // partition and offset, once acknowledged (acks=all by default)
//! producer.close().await;
//!
//! let mut consumer = Consumer::new(client, ConsumerConfig::default());
//! consumer.assign([TopicPartition::new("orders", landed.partition)]);
//! let records = consumer.poll(Duration::from_secs(1)).await?;
//! # Ok(()) }
//! ```
//!
//! * [`Client`] — connections, metadata cache, leader routing, safe retries with backoff and
//!   jitter; one-batch `produce`, `fetch`, `list_offset`; admin operations ([`admin`]).
//! * [`Producer`] — batching (`batch_size`, `linger`), compression, Kafka's partitioners, a
//!   future per record, `flush`, `close`.
//! * [`Consumer`] — assign, seek (offset, beginning, end, time), pipelined `poll`, pause/resume;
//!   with a group id, starts from the group's committed offsets and commits its positions; or
//!   `subscribe` as a member of a consumer group, with a [`RebalanceListener`].
//! * [`commits`] — a consumer's background commits ([`Consumer::commit_async`]), landing in the
//!   order they were made.
//! * [`membership`] — a subscribed consumer's heartbeats to its group's coordinator (KIP-848).
//! * [`coordinator`] — requests a coordinator serves: committed offsets, transactional
//!   producer ids; found with `Admin.FindCoordinator`.
//! * [`TransactionalProducer`] ([`transactional`]) — transactions: `init_transactions`,
//!   `begin_transaction`, `send`, `commit_transaction`, `abort_transaction` (transactions v2);
//!   [`transactions`] — ending and describing transactions at their coordinator.
//! * [`share`] — a [`share::ShareConsumer`]: a member of a share group (queues on the log),
//!   taking records one by one alongside other members and acknowledging each (accept,
//!   release with a delay, reject, renew); share groups' settings.
//! * [`partitioner`] — Kafka's default partitioner (murmur2), bit for bit.
//! * [`Error`] — the server's error code and message, or a transport failure.
//!
//! This crate depends only on the wire format (`rill-proto`, and `rill-records` for the record
//! batches inside it) and the runtime seam (`rill-rt`, so the deterministic simulation can drive
//! it), never on server crates.

#![warn(missing_docs)]

pub mod admin;
pub mod client;
pub mod commits;
pub mod consumer;
pub mod coordinator;
pub mod error;
pub mod membership;
pub mod partitioner;
pub mod producer;
pub mod record;
pub mod share;
pub mod transactional;
pub mod transactions;

pub use client::{Client, ClientOptions, DELETE_BELOW_HIGH_WATERMARK};
pub use commits::PendingCommit;
pub use consumer::{
    Consumer, ConsumerConfig, ConsumerGroupMetadata, ConsumerRecord, OffsetReset, OffsetResetEvent, RebalanceListener,
    TopicPartition,
};
pub use coordinator::{CommittedOffset, Coordinator};
pub use error::{Error, Result, TransactionErrorKind};
pub use producer::{DeliveryFuture, Producer, ProducerConfig};
pub use record::{
    Acks, FetchedPartition, IsolationLevel, OffsetSpec, ProduceAck, ReceivedRecord, Record, RecordMetadata,
};
pub use rill_proto::admin::{NodeDescription, PartitionDescription, TopicDescription, TopicSummary};
pub use rill_proto::common::ErrorCode;
pub use rill_records::Compression;
pub use transactional::TransactionalProducer;

/// A topic id as Kafka prints it: its 16 bytes in URL-safe base64 without padding (22
/// characters). Empty for an empty id.
pub fn topic_id_string(id: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id)
}

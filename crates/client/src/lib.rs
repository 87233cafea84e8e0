//! The Rust client for Rill.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rill_client::Error> {
//! use rill_client::{Acks, Client, Record};
//! let client = Client::connect(&["127.0.0.1:7001".to_string()]).await?;
//! client.create_topic("orders", 3, 3, &[]).await?;
//! let ack = client.produce("orders", 0, vec![Record::new("hello")], Acks::All).await?;
//! let fetched = client.fetch("orders", 0, ack.base_offset, std::time::Duration::from_millis(500)).await?;
//! # Ok(()) }
//! ```
//!
//! * [`client`]: [`Client`] — metadata cache, leader routing, retries of requests that were
//!   certainly not applied.
//! * [`partitioner`]: Kafka's default partitioner (murmur2), bit for bit.
//! * [`error`]: [`Error`], with the server's error code and message.
//!
//! This crate depends only on the wire format (`rill-proto`) and the runtime seam (`rill-rt`,
//! so the deterministic simulation can drive it), never on server crates.

pub mod client;
pub mod error;
pub mod partitioner;

pub use client::{Acks, Client, FetchedPartition, OffsetSpec, ProduceAck, ReceivedRecord, Record};
pub use error::{Error, Result};
pub use rill_proto::admin::{NodeDescription, PartitionDescription, TopicDescription};
pub use rill_proto::common::ErrorCode;

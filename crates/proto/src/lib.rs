//! Rill's wire format: the generated gRPC code for `proto/rill/*.proto`, the only place
//! protobuf codegen runs. Record batches inside the messages are Kafka's format; their codec is
//! `rill-records`.
//!
//! * [`common`]: error codes, leader hints, the record batch envelope.
//! * [`records`]: the `Records` service — Produce, Fetch, ListOffsets.
//! * [`admin`]: the `Admin` service — topics, cluster, client metadata.
//! * [`internal`]: node-to-node services (Raft transport, forwarding, replica status).
//! * [`groups`]: the `Groups` service — committed offsets of consumer groups.
//! * [`transactions`]: the `Transactions` service — adding partitions, ending and describing
//!   transactions.
//! * [`raft`], [`meta`], [`partition`], [`coordinator`]: persistent formats — Raft's entries, votes, snapshots
//!   and messages between nodes; the metadata's state, commands and results; a partition's
//!   snapshot; the coordinators' commands and snapshots. Versioned by protobuf's field numbers, so old data keeps reading.
//! * [`descriptor`]: every service and method of the protos, from the compiled descriptor set —
//!   which RPCs are public and which internal, for tests that must cover all of them.

#![allow(clippy::all)] // generated code below is not ours to lint
#![allow(missing_docs)]

#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod common {
    tonic::include_proto!("rill.common");
}
#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod records {
    tonic::include_proto!("rill.records");
}
#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod admin {
    tonic::include_proto!("rill.admin");
}
#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod internal {
    tonic::include_proto!("rill.internal");
}
#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod raft {
    tonic::include_proto!("rill.raft");
}
#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod meta {
    tonic::include_proto!("rill.meta");
}
#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod partition {
    tonic::include_proto!("rill.partition");
}
#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod coordinator {
    tonic::include_proto!("rill.coordinator");
}
#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod groups {
    tonic::include_proto!("rill.groups");
}

#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod transactions {
    tonic::include_proto!("rill.transactions");
}

#[allow(clippy::unwrap_used, clippy::expect_used)] // generated code
pub mod share {
    tonic::include_proto!("rill.share");
}

pub mod descriptor;

pub use common::ErrorCode;

/// Largest gRPC message Rill encodes or decodes. A produce request carries at most one batch per
/// partition of at most `max.message.bytes` (default 1 MiB); Raft append batches carry several.
pub const MAX_GRPC_MESSAGE_BYTES: usize = 64 << 20;

/// Longest a coordinator holds a `ConsumerGroupHeartbeat` that changes nothing (its `wait_ms`).
pub const MAX_HEARTBEAT_HOLD: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a heartbeat that asks to wait `wait` may be held — the rule the coordinator applies
/// and the client plans by: at most the wait, the heartbeat `interval`, a third of the `session`
/// timeout (a member's session runs from when its heartbeat left, up to two holds and their
/// round trips before an answer, on its clock and on the coordinator's) and
/// [`MAX_HEARTBEAT_HOLD`].
pub fn heartbeat_hold(
    wait: std::time::Duration,
    interval: std::time::Duration,
    session: std::time::Duration,
) -> std::time::Duration {
    wait.min(interval).min(session / 3).min(MAX_HEARTBEAT_HOLD)
}

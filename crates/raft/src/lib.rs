//! Multi-raft for Rill: many openraft groups per node sharing one storage engine and one
//! transport.
//!
//! ```text
//!              MultiRaft (one per node)
//!   ┌──────────────┬──────────────┬──────────────┐
//!   │ group 0      │ group 7      │ group 8      │  one openraft::Raft each
//!   │ LogStore ─┐  │ LogStore ─┐  │ LogStore ─┐  │
//!   │ SmStore   │  │ SmStore   │  │ SmStore   │  │  state machines supplied by the caller
//!   └───────────┼──┴───────────┼──┴───────────┼──┘
//!               ▼              ▼              ▼
//!          Engine (one RocksDB / MemEngine) + Syncer (group commit)
//!
//!   outgoing: GroupNetwork ──► Transport (one gRPC channel per peer) ──► peer's RaftService
//!             (heartbeats: per-peer queue ──► one Heartbeats call for many groups;
//!              idle groups quiesce: no heartbeats, one ping per peer instead)
//!   incoming: RaftService ──► MultiRaft::group(id) ──► openraft
//! ```
//!
//! * [`types`]: the openraft type configuration and the entry [`Payload`].
//! * [`runtime`]: openraft's `AsyncRuntime`, routed through `rill-rt` (so it runs under madsim).
//! * [`log_store`]: [`LogStore`] — the Raft log, votes and a dense *position* index over it.
//! * [`state_machine`]: [`GroupStateMachine`], what a group's owner implements, and its adapter.
//! * [`network`] and [`service`]: the shared transport, client and server side; the service
//!   checks that every message's node ids are its sender's own.
//! * [`intake`]: the bounds an incoming snapshot keeps (contiguous chunks, sizes, a leader).
//! * [`transfer`]: a snapshot as streamed — the state and the retained log entries, read from
//!   the log as it is sent and staged in the engine as it arrives.
//! * [`heartbeat`]: heartbeats of every group to one peer coalesced into one call.
//! * [`liveness`]: node-level liveness from pings, with restart detection.
//! * [`directory`]: which node leads each group, from the peers' reports on the pings.
//! * [`quiesce`]: idle groups stop heartbeating and rely on node liveness.
//! * [`multi`]: [`MultiRaft`], the registry of the groups running on this node.
//!
//! This crate knows nothing about records, offsets or topics: an entry carries opaque bytes and
//! declares how many *positions* it occupies (a partition uses one position per record, which
//! is how offsets stay dense and identical on every replica).

// openraft's StorageError is large, and its storage traits return it by value.
#![allow(clippy::result_large_err)]

pub mod codec;
pub mod directory;
pub mod error;
pub mod heartbeat;
pub mod intake;
pub mod keys;
pub mod liveness;
pub mod log_store;
pub mod multi;
pub mod network;
pub mod quiesce;
pub mod runtime;
pub mod service;
pub mod state_machine;
pub mod transfer;
pub mod types;

pub use error::{Error, Result};
pub use log_store::{LogStore, PositionedEntry};
pub use multi::{GroupOptions, MultiRaft, RaftTiming, RefusedCandidate};
pub use network::Transport;
pub use quiesce::Quiescence;
pub use state_machine::GroupStateMachine;
pub use types::{GroupId, NodeId, Payload, Raft, TypeConfig};

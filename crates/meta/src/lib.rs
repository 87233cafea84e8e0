//! Cluster metadata: the state machine of Raft group 0.
//!
//! ```text
//!   CreateTopic ──► (any node) ──forward──► group 0 leader ──Raft──► every node applies
//!                                                                   │
//!                      MetaState { nodes, topics → partitions → (group id, replicas) }
//!                                                                   │ watch
//!                                                 node reconciler starts its replicas
//! ```
//!
//! * [`state`]: [`MetaState`] and the commands that change it ([`MetaCommand`]).
//! * [`config`]: [`TopicConfig`] — per-topic settings, validated once.
//! * [`group_config`]: [`ShareGroupConfig`] — per-group settings (share groups), the keys an
//!   operator set kept in the metadata so every partition leader has them.
//! * [`placement`]: deterministic replica placement that spreads replicas and leaders.
//! * [`machine`]: [`MetaStateMachine`], the `GroupStateMachine` for group 0.
//! * [`codec`]: the versioned (prost) encoding of the state, the commands and their results.
//!
//! Validation happens inside `apply` (deterministically, on every node), so two concurrent
//! creates of one name cannot both succeed.

pub mod codec;
pub mod config;
pub mod error;
pub mod group_config;
pub mod machine;
pub mod placement;
pub mod state;

pub use config::{CleanupPolicy, ConfigEdits, TopicConfig};
pub use error::{MetaError, MetaErrorKind};
pub use group_config::{AutoOffsetReset, ShareGroupConfig};
pub use machine::MetaStateMachine;
pub use state::{
    MetaCommand, MetaResult, MetaState, NodeInfo, PartitionAssignment, PartitionKind, TopicId, TopicMeta,
    CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC,
};

/// The Raft group id of the cluster metadata.
pub const META_GROUP: rill_raft::GroupId = 0;

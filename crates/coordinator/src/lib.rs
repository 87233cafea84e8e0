//! Coordinators: the state kinds of Rill's internal topics, and the requests they serve.
//!
//! ```text
//!  request for id X ─► partition = hash(X) % partitions of the internal topic (hash)
//!                   ─► that partition's leader is X's coordinator: StatePartition<Kind>
//!                        read: the caught-up leader's state       propose: a command, committed
//! ```
//!
//! * [`hash`]: which partition of an internal topic an id belongs to (Kafka's rule).
//! * [`offsets`]: the `consumer-offsets` kind — consumer groups' committed offsets, and the
//!   machine that also holds their membership.
//! * [`groups`]: consumer groups (KIP-848) — members, epochs, target and current assignments,
//!   the server-side assignors, and the coordinator's decisions for heartbeats and timeouts — and
//!   classic groups ([`groups::classic`]: Kafka's JoinGroup / SyncGroup protocol, a sans-IO
//!   engine on the leader over a replicated record per group).
//! * [`transactions`]: the `transaction-state` kind — each transactional id's producer id,
//!   epoch and transaction (state, partitions, groups, protocol version), and the transaction
//!   coordinator's decisions ([`transactions::transitions`]).
//! * [`error`]: the coordinators' error enum, [`CoordinatorError`].
//!
//! Each kind is a `GroupStateMachine` whose snapshot is its whole state (prost messages of
//! `proto/rill/coordinator.proto`); its partition's log is purged behind the snapshot. What a
//! command changes is decided on the leader and carried in the command, so `apply` is plain
//! bookkeeping every replica repeats identically.

pub mod error;
pub mod groups;
pub mod hash;
pub mod offsets;
pub mod transactions;

pub use error::{CoordinatorError, Result};
pub use offsets::{CommittedOffset, OffsetCommit, OffsetsMachine};
pub use transactions::{TransactionMetadata, TransactionsMachine, TxnState};

//! Partition replicas.
//!
//! ```text
//!  Produce ─► Partition::produce ─► checks (leader, size, CRC, ISR ≥ min) ─► Raft proposal
//!                 │ acks=none: answer now
//!                 │ acks=leader: answer when the entry is synced in the leader's log
//!                 │ acks=all: answer when committed (majority synced) and every ISR member has it
//!  Fetch ─► Partition::fetch ─► offset index ─► Raft log entries below the high watermark
//! ```
//!
//! * [`command`]: the partition's Raft entry body (record batches, stored as produced).
//! * [`machine`]: [`PartitionStateMachine`] — offsets and the high watermark.
//! * [`epochs`]: [`epochs::LeaderEpochs`] — where each leader epoch's records begin
//!   (`OffsetForLeaderEpoch`).
//! * [`index`]: [`index::SparseIndex`] — the log start offset, and the sparse map of the log by
//!   append time and size.
//! * [`handover`]: moving leadership to another replica (preferred-leader balancing).
//! * [`isr`]: [`IsrTracker`] — which followers are in sync, from Raft replication progress.
//! * [`replica`]: [`Replica`] — what every kind of partition replica shares: its Raft group,
//!   ISR view, settings, status, leadership moves ([`handover`]).
//! * [`partition`]: [`Partition`] — a record partition replica: its parts, status and
//!   housekeeping; its produce path is [`produce`], its read path [`fetch`].
//! * [`produce`]: checks, proposal and the acknowledgement levels.
//! * [`verifying`]: one transactional verification at a time per producer epoch, its answer
//!   shared by the batches that arrive meanwhile.
//! * [`share`]: [`share::SharePartition`] — a share group's reading of a partition (queues on
//!   the log): records acquired under locks, delivery counts, acknowledgements, expiries,
//!   delays and archiving, as commands applied the same on every replica; its stored forms
//!   (`share::stored`) and the leader's side (`share::leader`: fetches that acquire, the lock
//!   timer; `share::dead_letters`: the writer of dead-letter copies, exactly once).
//! * [`submit_order`]: [`SubmitOrder`] — the batches of a connection's pipelined requests
//!   queued for their logs in the order the requests came.
//! * [`fetch`]: fetch, the long poll, and the offsets `ListOffsets` asks for.
//! * [`state_partition`]: [`StatePartition`] — a partition of an internal topic whose state
//!   machine is its data (a coordinator's state): read on the caught-up leader, propose commands.
//! * [`cleaning`]: [`cleaning::Cleaning`] — a compacted topic's replicated cleaning point: what
//!   compaction may remove, chosen by the leader, identical on every replica.
//! * [`compaction`]: rewriting a replica's entries below its cleaning point and its snapshot so
//!   they keep only the newest record per key (offsets preserved).
//! * [`retention`]: moving the log start offset — `DeleteRecords` and retention by time and
//!   size.
//! * [`producers`]: idempotent producer state (last five batches per producer id, and the
//!   coordinator epoch of its last transaction marker).
//! * [`transactions`]: transactions as a partition sees them — open ones, the last stable
//!   offset, the aborted index, and what a `read_committed` fetch leaves out.
//! * [`propose`]: [`Proposer`] — batches that arrive while the previous entry is being written go
//!   to Raft together, as one entry, as do batches submitted under one [`propose::Hold`].
//!
//! Offsets are Raft *positions*: an entry whose batches span `n` offsets occupies `n` positions,
//! assigned when it is appended and identical on every replica (see `rill_raft::log_store`).
//! Compaction removes records but never offsets: a batch keeps its span. The high
//! watermark is the end position of the last applied (hence committed) entry.

pub mod cleaning;
pub mod command;
pub mod compaction;
pub mod epochs;
pub mod error;
pub mod fetch;
pub mod handover;
pub mod idempotence;
pub mod index;
pub mod isr;
pub mod machine;
pub mod partition;
pub mod produce;
pub mod producers;
pub mod propose;
pub mod replica;
pub mod retention;
pub mod share;
pub mod state_partition;
pub mod submit_order;
pub mod transactions;
pub mod verifying;

pub use compaction::CompactionBudget;
pub use error::{PartitionError, Result};
pub use fetch::{FetchOutcome, Isolation, StoredBatch, TimestampedOffset};
pub use isr::{IsrTracker, IsrView};
pub use machine::PartitionStateMachine;
pub use partition::{Acks, Partition, ProduceOutcome, ReplicaState};
pub use propose::Proposer;
pub use replica::Replica;
pub use state_partition::StatePartition;
pub use submit_order::{SubmitOrder, SubmitTurn};

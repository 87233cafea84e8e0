//! The storage boundary of a Rill node.
//!
//! ```text
//!   raft log store, state machines
//!          │ WriteBatch (atomic)            │ reads (get / scan / scan_rev)
//!          ▼                                ▼
//!   ┌──────────── trait Engine ─────────────────┐      Syncer: many callers,
//!   │ write(batch, sync)  sync()                │ ◄─── one engine.sync() at a time
//!   └───────────────────────────────────────────┘      (group commit)
//!        │ real builds                 │ simulation
//!        ▼                             ▼
//!   rill-storage-rocks            MemEngine (visible vs durable state,
//!   (value log fsync,             power_fail() drops what was not synced)
//!    RocksDB index)
//! ```
//!
//! * [`engine`]: the [`Engine`] trait, [`Keyspace`]s and [`WriteBatch`].
//! * [`memory`]: [`MemEngine`], the in-memory engine the simulation runs on.
//! * [`syncer`]: [`Syncer`], group commit — concurrent callers share one sync.
//! * [`health`]: [`monitor`] wraps the node's engine so its first failed write or sync is final,
//!   and [`StorageHealth`] tells the node (which then leaves replication).
//! * [`conformance`]: the suite every engine must pass (crash and power-failure cases included).
//!
//! This crate names no storage library: RocksDB lives only in `rill-storage-rocks`.

pub mod conformance;
pub mod engine;
pub mod error;
pub mod health;
pub mod memory;
pub mod syncer;

pub use engine::{Engine, KeyValue, Keyspace, WriteBatch, WriteOp};
pub use error::{Error, Result};
pub use health::{monitor, StorageHealth};
pub use memory::MemEngine;
pub use syncer::Syncer;

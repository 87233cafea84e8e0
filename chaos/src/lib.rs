//! Deterministic simulation of Rill clusters.
//!
//! Build and run with `--cfg madsim` (see `chaos/run`): every node runs `rill_server::start`, the
//! same function the binary runs, on a madsim simulated node with an in-memory engine
//! ([`rill_storage::MemEngine`]) that outlives crashes, so a restarted node reopens its "disk"
//! and a power failure loses exactly what was not synced.
//!
//! ```text
//!  scenario ─┬─ SimCluster (nodes, disks, network)      ── faults: crash, power, pause, partitions,
//!            │                                             loss, delay (drawn from the seed)
//!            ├─ workload: producers + consumers ──► Recorder (invoke / ok | fail | info)
//!            ├─ oracles: watermark samples, durable copies at each ack, replica logs
//!            └─ heal ─► liveness ─► final reads ─► checkers ─► violations, trace hash
//! ```
//!
//! * [`history`] and [`checkers`]: the record of a run and one checker per invariant (plain
//!   code, unit-tested in every build).
//! * [`scenarios`]: the named scenarios and what they enable.
//! * `cluster`, `faults`, `workload`, `oracle`, `run`: the simulation itself (madsim
//!   builds only); `group_run`: consumer group members under faults and the `groups` scenario;
//!   `classic_run`: classic group members (JoinGroup / SyncGroup) under faults, the
//!   `classic_groups` scenario;
//!   `txn_run`: transactional producers and read_committed readers under faults, the
//!   `transactions` scenario; `ctp_run`: consume-transform-produce processors committing
//!   offsets in their transactions, the `exactly_once` scenario; `share_run`: share group workers
//!   acknowledging record by record under faults, the `share_groups` scenario.
//! * [`trace`]: the event record whose hash proves a seed replays exactly.

// A test harness: a broken precondition (no node up, no topic) is a failed run, said loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod checkers;
pub mod history;
pub mod scenarios;
pub mod trace;

#[cfg(madsim)]
pub mod classic_run;
#[cfg(madsim)]
pub mod cluster;
#[cfg(madsim)]
pub mod ctp_run;
#[cfg(madsim)]
pub mod faults;
#[cfg(madsim)]
pub mod group_run;
#[cfg(madsim)]
pub mod oracle;
#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod share_run;
#[cfg(madsim)]
pub mod txn_run;
#[cfg(madsim)]
pub mod workload;

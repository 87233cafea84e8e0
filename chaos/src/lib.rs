//! Deterministic simulation of Rill clusters.
//!
//! Build and run with `--cfg madsim` (see `chaos/run`): every node runs `rill_server::start`, the
//! same function the binary runs, on a madsim simulated node with an in-memory engine
//! ([`rill_storage::MemEngine`]) that outlives crashes, so a restarted node reopens its "disk"
//! and a power failure loses exactly what was not synced.
//!
//! * [`cluster`]: [`cluster::SimCluster`] — boot, kill, power-fail, restart nodes; run clients.
//! * [`trace`]: [`trace::Trace`] — the event record whose hash proves a seed replays exactly.
//!
//! Outside a madsim build this crate is empty.

#[cfg(madsim)]
pub mod cluster;
pub mod trace;

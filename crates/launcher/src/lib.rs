//! Local clusters of real `rill-server` processes on 127.0.0.1: the one launcher the
//! integration tests (`tests/`), `rill dev` and `rill bench` start, stop and inspect nodes with.
//!
//! ```text
//!   LocalCluster::start(spec) ──► ChildProcess per node (rill-server, log file node-N.log)
//!        │ wait_ready: metadata leader elected, every running node registered and alive
//!        │ kill (SIGKILL) · terminate (SIGTERM, graceful) · start_node (restart on its data)
//!        ▼ dropped: every node it started is stopped; a launcher that dies takes them along
//! ```
//!
//! * [`process`]: [`ChildProcess`] — one server process with its log file, signalled with
//!   `nix` (no shell), and tied to the launcher's life through the parent-death signal.
//! * [`cluster`]: [`LocalCluster`] and its [`ClusterSpec`] — N nodes, their ports and data
//!   directories, readiness, logs for failure messages.
//! * [`binary`]: where the `rill-server` binary is.
//!
//! Readiness is decided by the client's own waits ([`rill_client::Client::wait_for_cluster`],
//! [`rill_client::Client::wait_for_leaders`]), the same ones the simulation uses.

// The launcher supervises real OS processes on the real clock; it never runs inside the
// simulation, whose determinism seam is for node code.
#![allow(clippy::disallowed_methods)]

pub mod binary;
pub mod cluster;
pub mod process;

pub use binary::server_binary;
pub use cluster::{ClusterSpec, LocalCluster, Ports};
pub use process::{ChildProcess, PARENT_PID_ENV};

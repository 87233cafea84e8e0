//! Node certificates for the internal listener's mutual TLS.
//!
//! A node's certificate is issued by the cluster's CA and names the node: its subject
//! alternative name is the DNS name [`node_name`] (`node-<id>`). A node dialing a peer expects the
//! peer's certificate to name the peer it meant to reach; a node answering a peer learns from the
//! peer's certificate which node is calling ([`PeerCertificate::names`]).
//!
//! ```text
//!   ca.pem, node-N.pem, node-N.key ──► NodeTls::load (checked)
//!        │ polled (reload)                 │
//!        ▼                                 ▼
//!   ReloadingTls: the current material, swapped when a changed set checks out
//!        │ server_config()                 │ client_config()
//!        ▼                                 ▼
//!   acceptor::incoming ──► tonic server    connector::NodeConnector ──► tonic channel
//!   (internal listener)                    (dialing node-<peer>)
//!        │ each connection, registered       │
//!        ▼                                   ▼
//!   Connections: live connections and their peers' chains, checked again at every poll;
//!   one whose peer no longer verifies (CA out of ca.pem, expired) is closed (Tracked)
//! ```
//!
//! * [`files`]: [`TlsPaths`] and [`NodeTls`], the CA, certificate and key a node reads from PEM
//!   files, read once and checked.
//! * [`reload`]: [`ReloadingTls`], that material kept current: the files are polled and a
//!   changed set that checks out is swapped in; a bad one is logged and the old one kept.
//! * `config` (real builds): the rustls server and client configurations of a
//!   [`ReloadingTls`], whose certificate resolvers and verifiers read the current material at
//!   every handshake.
//! * `acceptor` (real builds): the internal listener's TCP accept loop with concurrent,
//!   time-bounded TLS handshakes, as a stream for tonic's `serve_with_incoming_shutdown`.
//! * `connector` (real builds): the tower connector a tonic channel dials a peer with.
//! * `connections` (real builds): [`connections::Connections`], the established connections of
//!   both sides with their peers' certificate chains, and the sweep that closes those whose peer
//!   no longer verifies.
//! * `tracked` (real builds): [`tracked::Tracked`], a connection's stream that fails once the
//!   registry tells it to close, and leaves the registry when dropped.
//! * [`issue`]: a throwaway CA and node certificates (rcgen), for `rill dev`, the test kit and
//!   operators who want a starting point.
//! * [`peer`]: which node a presented certificate names.
//! * [`caller`]: [`Caller`], the peer behind an internal request, and whether it may speak for
//!   the node ids its message names.
//!
//! The simulation has no TLS (madsim's network has none): `config`, `acceptor`, `connector`,
//! `connections` and `tracked`, and every rustls type, exist in real builds only.

#[cfg(not(madsim))]
pub mod acceptor;
pub mod caller;
#[cfg(not(madsim))]
pub mod config;
#[cfg(not(madsim))]
pub mod connections;
#[cfg(not(madsim))]
pub mod connector;
pub mod error;
pub mod files;
pub mod issue;
pub mod peer;
pub mod reload;
#[cfg(not(madsim))]
pub mod tracked;

pub use caller::{Caller, Impersonation};
pub use error::TlsError;
pub use files::{NodeTls, TlsPaths};
pub use peer::PeerCertificate;
pub use reload::{Reload, ReloadingTls, RELOAD_POLL_INTERVAL};

/// The DNS name a node's certificate carries: `node-<id>`.
pub fn node_name(id: u64) -> String {
    format!("node-{id}")
}

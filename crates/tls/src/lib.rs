//! Node certificates for the internal listener's mutual TLS.
//!
//! A node's certificate is issued by the cluster's CA and names the node: its subject
//! alternative name is the DNS name [`node_name`] (`node-<id>`). A node dialing a peer expects the
//! peer's certificate to name the peer it meant to reach; a node answering a peer learns from the
//! peer's certificate which node is calling ([`PeerCertificate::names`]).
//!
//! * [`files`]: [`NodeTls`], the CA, certificate and key a node reads from PEM files, and the
//!   tonic server and client configurations built from them.
//! * [`issue`]: a throwaway CA and node certificates (rcgen), for `rill dev`, the test kit and
//!   operators who want a starting point.
//! * [`peer`]: which node a presented certificate names.
//! * [`caller`]: [`Caller`], the peer behind an internal request, and whether it may speak for
//!   the node ids its message names.

pub mod caller;
pub mod error;
pub mod files;
pub mod issue;
pub mod peer;

pub use caller::{Caller, Impersonation};
pub use error::TlsError;
pub use files::{NodeTls, TlsPaths};
pub use peer::PeerCertificate;

/// The DNS name a node's certificate carries: `node-<id>`.
pub fn node_name(id: u64) -> String {
    format!("node-{id}")
}

//! Who is calling an internal RPC: [`Caller`].
//!
//! The TLS handshake proves that a peer holds a certificate from the cluster's CA; it does not
//! prove that a message's embedded node ids (a vote's candidate, an append's leader, a batch's
//! `from_node`, a joining node's id) are the peer's own. Every internal handler asks its
//! [`Caller`] whether it may speak for the ids its message names, so a node can only ever act as
//! itself.

use std::sync::{Arc, OnceLock};

use rustls_pki_types::CertificateDer;

use crate::peer::PeerCertificate;

/// A peer's certificate chain, leaf first, as the TLS session holds it (shared, not copied).
pub type PeerChain = Arc<Vec<CertificateDer<'static>>>;

/// The peer behind one internal request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The internal listener runs without TLS (the insecure setting, or the simulation, whose
    /// network has none): nothing is known of the caller, and it is trusted to be any node.
    Unverified,
    /// A peer that presented a certificate chaining to the cluster's CA: its chain, leaf first,
    /// and the node id the leaf was last found to name (a heartbeat batch checks hundreds of
    /// messages naming the same sender: the certificate is read once, not once per message).
    Certified {
        /// The chain, leaf first.
        chain: PeerChain,
        /// A node id the leaf names, once one was checked.
        named: OnceLock<u64>,
    },
    /// The listener requires certificates, yet this request arrived without one. Refused.
    Anonymous,
}

impl Caller {
    /// The caller of `request`, on a listener that requires node certificates when `secure`.
    pub fn of<T>(request: &tonic::Request<T>, secure: bool) -> Self {
        if !secure {
            return Self::Unverified;
        }
        match chain(request) {
            Some(chain) if !chain.is_empty() => Self::certified(chain),
            _ => Self::Anonymous,
        }
    }

    /// A caller that presented `chain` (leaf first).
    pub fn certified(chain: PeerChain) -> Self {
        Self::Certified { chain, named: OnceLock::new() }
    }

    /// True when this caller may send messages on behalf of node `id`.
    pub fn speaks_for(&self, id: u64) -> bool {
        match self {
            Self::Unverified => true,
            Self::Certified { chain, named } => {
                if named.get() == Some(&id) {
                    return true;
                }
                let names = chain.first().is_some_and(|leaf| PeerCertificate::new(leaf).names(id));
                if names {
                    let _ = named.set(id);
                }
                names
            }
            Self::Anonymous => false,
        }
    }

    /// `Ok` when this caller may speak for node `id` in `what` (a short description of the
    /// message, for the refusal); otherwise why not.
    pub fn check(&self, id: u64, what: &str) -> Result<(), Impersonation> {
        if self.speaks_for(id) {
            Ok(())
        } else {
            Err(Impersonation { claimed: id, what: what.to_string(), anonymous: *self == Self::Anonymous })
        }
    }

    /// True when the caller presented a certificate (or none is required).
    pub fn is_authenticated(&self) -> bool {
        !matches!(self, Self::Anonymous)
    }
}

/// A message that names a node other than the one whose certificate sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct Impersonation {
    /// The node id the message claims.
    pub claimed: u64,
    /// Which message, and which of its fields.
    pub what: String,
    /// No certificate at all was presented.
    pub anonymous: bool,
}

impl Impersonation {
    fn describe(&self) -> String {
        if self.anonymous {
            format!("{} names node {}, but the caller presented no node certificate", self.what, self.claimed)
        } else {
            format!(
                "{} names node {}, but the caller's certificate does not name {}",
                self.what,
                self.claimed,
                crate::node_name(self.claimed)
            )
        }
    }
}

/// The peer's certificate chain, when the connection is TLS with a client certificate.
#[cfg(not(madsim))]
fn chain<T>(request: &tonic::Request<T>) -> Option<PeerChain> {
    request.peer_certs()
}

/// The simulation has no TLS: no request carries a certificate.
#[cfg(madsim)]
fn chain<T>(_request: &tonic::Request<T>) -> Option<PeerChain> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issue::ClusterCa;

    #[test]
    fn a_certified_caller_speaks_only_for_the_node_its_certificate_names() {
        use rustls_pki_types::pem::PemObject;
        let ca = ClusterCa::generate("test").expect("a CA");
        let (cert, _key) = ca.issue_node(2).expect("a node certificate");
        let der = CertificateDer::from_pem_slice(cert.as_bytes()).expect("PEM").into_owned();
        let caller = Caller::certified(Arc::new(vec![der]));
        assert!(caller.speaks_for(2));
        assert!(caller.speaks_for(2), "and again, from the remembered answer");
        assert!(!caller.speaks_for(1));
        assert!(!caller.speaks_for(20), "node-2 must not match node-20");
        let refused = caller.check(3, "a vote's candidate").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "a vote's candidate names node 3, but the caller's certificate does not name node-3"
        );
    }

    #[test]
    fn an_unverified_caller_is_anyone_and_an_anonymous_one_is_no_one() {
        assert!(Caller::Unverified.speaks_for(7));
        assert!(!Caller::Anonymous.speaks_for(7));
        assert!(!Caller::Anonymous.is_authenticated());
        let plain = tonic::Request::new(());
        assert_eq!(Caller::of(&plain, false), Caller::Unverified);
        assert_eq!(Caller::of(&plain, true), Caller::Anonymous);
    }
}

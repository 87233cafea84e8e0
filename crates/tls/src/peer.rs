//! Which node a certificate names.

use rustls_pki_types::{CertificateDer, ServerName};

/// A certificate a peer presented (DER). Its chain to the cluster CA was verified by the TLS
/// handshake; this only reads which node it names.
pub struct PeerCertificate<'a>(CertificateDer<'a>);

impl<'a> PeerCertificate<'a> {
    /// Wraps a DER certificate.
    pub fn new(der: &'a [u8]) -> Self {
        Self(CertificateDer::from(der))
    }

    /// True when the certificate is valid for `node-<id>` (a DNS subject alternative name).
    pub fn names(&self, id: u64) -> bool {
        let Ok(cert) = webpki::EndEntityCert::try_from(&self.0) else { return false };
        let Ok(name) = ServerName::try_from(crate::node_name(id)) else { return false };
        cert.verify_is_valid_for_subject_name(&name).is_ok()
    }

    /// The node ids the certificate's DNS names spell (`node-<id>`), for logs that say whose a
    /// certificate is. Not a check: whether a certificate may act as a node is [`Self::names`].
    pub fn node_ids(&self) -> Vec<u64> {
        let Ok(cert) = webpki::EndEntityCert::try_from(&self.0) else { return Vec::new() };
        cert.valid_dns_names()
            .filter_map(|name| {
                let id: u64 = name.strip_prefix("node-")?.parse().ok()?;
                // `node-02` is not node 2's name.
                (crate::node_name(id) == name).then_some(id)
            })
            .collect()
    }
}

//! [`NodeTls`]: what a node reads to speak mutual TLS with its peers, read once and checked.
//! [`crate::reload::ReloadingTls`] reads it again when the files change.

use std::path::{Path, PathBuf};

use crate::error::TlsError;
use crate::peer::PeerCertificate;

/// Where a node's CA certificate, certificate and private key are (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPaths {
    /// The cluster CA's certificate: peers' certificates must chain to it.
    pub ca: PathBuf,
    /// This node's certificate (naming `node-<id>`).
    pub cert: PathBuf,
    /// This node's private key.
    pub key: PathBuf,
}

/// A node's TLS material, read and checked.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeTls {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl std::fmt::Debug for NodeTls {
    // Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls").field("ca_bytes", &self.ca.len()).field("cert_bytes", &self.cert.len()).finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io { path: path.to_path_buf(), source })
}

/// The DER blocks of the PEM `CERTIFICATE`s in `pem`.
pub(crate) fn certificates(pem: &[u8], path: &Path) -> Result<Vec<Vec<u8>>, TlsError> {
    use rustls_pki_types::pem::PemObject;
    let invalid = |what: String| TlsError::Invalid { path: path.to_path_buf(), what };
    let certs: Vec<Vec<u8>> = rustls_pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid("holds no PEM certificate".into()));
    }
    Ok(certs)
}

impl NodeTls {
    /// Reads the files and checks that the certificate names node `node_id` (so a node started
    /// with another node's files fails at once, not at its first handshake).
    pub fn load(paths: &TlsPaths, node_id: u64) -> Result<Self, TlsError> {
        let ca = read(&paths.ca)?;
        certificates(&ca, &paths.ca)?;
        let cert = read(&paths.cert)?;
        let key = read(&paths.key)?;
        {
            use rustls_pki_types::pem::PemObject;
            rustls_pki_types::PrivateKeyDer::from_pem_slice(&key).map_err(|e| TlsError::Invalid {
                path: paths.key.clone(),
                what: format!("not a PEM private key: {e}"),
            })?;
        }
        let leaf = certificates(&cert, &paths.cert)?.remove(0);
        if !PeerCertificate::new(&leaf).names(node_id) {
            return Err(TlsError::Invalid {
                path: paths.cert.clone(),
                what: format!(
                    "does not name this node: its subject alternative names must include {}",
                    crate::node_name(node_id)
                ),
            });
        }
        Ok(Self { ca, cert, key })
    }

    /// The CA certificates (PEM).
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca
    }

    /// This node's certificate chain (PEM).
    pub fn cert_pem(&self) -> &[u8] {
        &self.cert
    }

    /// This node's private key (PEM).
    #[cfg_attr(madsim, allow(dead_code))] // read by the rustls configurations, which real builds have
    pub(crate) fn key_pem(&self) -> &[u8] {
        &self.key
    }
}

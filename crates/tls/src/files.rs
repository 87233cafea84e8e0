//! [`NodeTls`]: what a node reads to speak mutual TLS with its peers.

use std::path::{Path, PathBuf};

// The simulation's tonic has no TLS types (its network has no TLS): the configurations exist in
// real builds only.
#[cfg(not(madsim))]
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

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
#[derive(Debug, Clone)]
#[cfg_attr(madsim, allow(dead_code))] // read by the TLS configurations, which real builds have
pub struct NodeTls {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io { path: path.to_path_buf(), source })
}

/// The DER blocks of the PEM `CERTIFICATE`s in `pem`.
fn certificates(pem: &[u8], path: &Path) -> Result<Vec<Vec<u8>>, TlsError> {
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

    /// The internal listener's configuration: this node's identity, and peers must present a
    /// certificate issued by the CA (client authentication is required, not optional).
    #[cfg(not(madsim))]
    pub fn server_config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
    }

    /// The configuration for dialing node `peer`: its certificate must chain to the CA and name
    /// `node-<peer>`; this node presents its own.
    #[cfg(not(madsim))]
    pub fn client_config(&self, peer: u64) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(crate::node_name(peer))
    }
}

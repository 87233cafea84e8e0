//! Throwaway certificates: a cluster CA and node certificates signed by it, as PEM files.
//!
//! `rill dev` and the test kit make a fresh set per cluster; `rill tls ca` / `rill tls node` make
//! them for a deployment. A CA made here is kept as `ca.pem`, `ca.key` and `ca.name` in one
//! directory, so node certificates can be issued from it later (a node added to the cluster).
//! Any other CA works as well (docs/security.md): what matters is the subject alternative name
//! `node-<id>` and the CA every node trusts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use crate::error::TlsError;
use crate::files::TlsPaths;

/// A CA that can issue node certificates.
pub struct ClusterCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    name: String,
}

fn issue_error(e: rcgen::Error) -> TlsError {
    TlsError::Issue(e.to_string())
}

fn write(path: &Path, contents: &str) -> Result<(), TlsError> {
    std::fs::write(path, contents).map_err(|source| TlsError::Io { path: path.to_path_buf(), source })
}

/// Writes a private key, readable by its owner only.
fn write_secret(path: &Path, contents: &str) -> Result<(), TlsError> {
    use std::os::unix::fs::PermissionsExt;
    write(path, contents)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|source| TlsError::Io { path: path.to_path_buf(), source })
}

impl ClusterCa {
    /// The CA's parameters: what its certificate says and what an issuer needs (the subject and
    /// the key usages). The same for a name every time, so a saved CA key can issue again.
    fn params(name: &str) -> Result<CertificateParams, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(issue_error)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        Ok(params)
    }

    /// A new CA named `name`, with a fresh key.
    pub fn generate(name: &str) -> Result<Self, TlsError> {
        let key = KeyPair::generate().map_err(issue_error)?;
        let params = Self::params(name)?;
        let cert = params.self_signed(&key).map_err(issue_error)?;
        Ok(Self { cert_pem: cert.pem(), issuer: Issuer::new(params, key), name: name.to_string() })
    }

    /// Writes `ca.pem`, `ca.key` (owner-only) and `ca.name` under `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), TlsError> {
        std::fs::create_dir_all(dir).map_err(|source| TlsError::Io { path: dir.to_path_buf(), source })?;
        write(&dir.join("ca.pem"), &self.cert_pem)?;
        write(&dir.join("ca.name"), &self.name)?;
        write_secret(&dir.join("ca.key"), &self.issuer.key().serialize_pem())
    }

    /// Reads a CA that [`ClusterCa::save`] wrote.
    pub fn load(dir: &Path) -> Result<Self, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| TlsError::Io { path, source })
        };
        let (cert_pem, key_pem, name) = (read("ca.pem")?, read("ca.key")?, read("ca.name")?);
        let key = KeyPair::from_pem(&key_pem)
            .map_err(|e| TlsError::Invalid { path: dir.join("ca.key"), what: format!("not a PEM private key: {e}") })?;
        let name = name.trim().to_string();
        Ok(Self { issuer: Issuer::new(Self::params(&name)?, key), cert_pem, name })
    }

    /// The CA certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A certificate and key for node `id`: subject alternative name `node-<id>`, usable both to
    /// serve and to dial (mutual TLS). Returns (certificate PEM, key PEM).
    pub fn issue_node(&self, id: u64) -> Result<(String, String), TlsError> {
        self.issue(id, None)
    }

    /// As [`ClusterCa::issue_node`], but the certificate expires `valid_for` from now (to the
    /// second, as X.509 times go): for trying out what a node does with expired certificates.
    pub fn issue_node_valid_for(&self, id: u64, valid_for: Duration) -> Result<(String, String), TlsError> {
        self.issue(id, Some(valid_for))
    }

    fn issue(&self, id: u64, valid_for: Option<Duration>) -> Result<(String, String), TlsError> {
        let name = crate::node_name(id);
        let key = KeyPair::generate().map_err(issue_error)?;
        let mut params = CertificateParams::new(vec![name.clone()]).map_err(issue_error)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        if let Some(valid_for) = valid_for {
            let now_ms = u64::try_from(rill_rt::wall_clock_ms()).unwrap_or(0);
            params.not_after = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_millis(now_ms) + valid_for;
        }
        let cert = params.signed_by(&key, &self.issuer).map_err(issue_error)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Writes `ca.pem` and a new `node-<id>.pem` / `node-<id>.key` (owner-only) under `dir`;
    /// returns the node's paths.
    pub fn write_node(&self, dir: &Path, id: u64) -> Result<TlsPaths, TlsError> {
        std::fs::create_dir_all(dir).map_err(|source| TlsError::Io { path: dir.to_path_buf(), source })?;
        let ca = dir.join("ca.pem");
        write(&ca, &self.cert_pem)?;
        let (cert_pem, key_pem) = self.issue_node(id)?;
        let cert: PathBuf = dir.join(format!("node-{id}.pem"));
        let key: PathBuf = dir.join(format!("node-{id}.key"));
        write(&cert, &cert_pem)?;
        write_secret(&key, &key_pem)?;
        Ok(TlsPaths { ca, cert, key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeTls, PeerCertificate};

    #[test]
    fn a_node_certificate_names_its_node_only() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::generate("test cluster").unwrap();
        let paths = ca.write_node(dir.path(), 2).unwrap();
        NodeTls::load(&paths, 2).unwrap();
        let err = NodeTls::load(&paths, 3).unwrap_err().to_string();
        assert!(err.contains("does not name this node") && err.contains("node-3"), "{err}");
        let pem = std::fs::read(&paths.cert).unwrap();
        use rustls_pki_types::pem::PemObject;
        let der = rustls_pki_types::CertificateDer::from_pem_slice(&pem).unwrap();
        assert!(PeerCertificate::new(&der).names(2));
        assert!(!PeerCertificate::new(&der).names(3));
        assert!(!PeerCertificate::new(&der).names(22));
        assert!(!PeerCertificate::new(b"not a certificate").names(2));
    }

    #[test]
    fn a_saved_ca_issues_certificates_that_chain_to_it() {
        use rustls_pki_types::pem::PemObject;
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::generate("saved").unwrap();
        ca.save(dir.path()).unwrap();
        let again = ClusterCa::load(dir.path()).unwrap();
        assert_eq!(again.cert_pem(), ca.cert_pem());
        let (cert_pem, _) = again.issue_node(4).unwrap();
        let der = rustls_pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let anchor_der = rustls_pki_types::CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap();
        let anchors = [webpki::anchor_from_trusted_cert(&anchor_der).unwrap()];
        let cert = webpki::EndEntityCert::try_from(&der).unwrap();
        let chained = cert.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &[],
            rustls_pki_types::UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        );
        assert!(chained.is_ok(), "{:?}", chained.as_ref().err());
        assert!(PeerCertificate::new(&der).names(4));
    }
}

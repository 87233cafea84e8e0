//! The crate's one error type.

use std::path::PathBuf;

/// Why certificates could not be read, made or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A file does not hold what it should.
    #[error("{}: {what}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// Making a certificate failed.
    #[error("cannot issue a certificate: {0}")]
    Issue(String),
    /// A node's name (`node-<id>`) is not usable as a TLS server name.
    #[error("{name} is not a DNS name")]
    NodeName {
        /// The name.
        name: String,
    },
    /// rustls refused a configuration.
    #[cfg(not(madsim))]
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

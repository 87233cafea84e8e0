//! Errors of the storage layer. All of them are fatal for the operation that met them: the caller
//! must not acknowledge anything that depended on the failed write.

/// A storage failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The engine reported an I/O failure (disk full, permission, device error).
    #[error("storage I/O error: {0}")]
    Io(String),
    /// Stored bytes failed validation.
    #[error("storage corruption: {0}")]
    Corruption(String),
    /// The engine has been closed or failed earlier and refuses further work.
    #[error("storage engine is unavailable: {0}")]
    Unavailable(String),
}

/// Result alias for storage operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

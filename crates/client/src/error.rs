//! Client errors.

use rill_proto::common::ErrorCode;

/// A failed client operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The server answered with an error code.
    #[error("{} ({}): {message}", code.as_str_name(), *code as i32)]
    Server {
        /// The stable error code.
        code: ErrorCode,
        /// The server's explanation.
        message: String,
    },
    /// No node could be reached, or the connection failed mid-request. For a produce the
    /// outcome is unknown: the batch may or may not have been written.
    #[error("transport error: {0}")]
    Transport(String),
    /// A bad argument, caught before sending.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A wait for a cluster condition ran out of time; the message says what was missing.
    #[error("timed out: {0}")]
    TimedOut(String),
    /// A transaction cannot commit because one of its sends failed (the cause); nothing was
    /// asked of the coordinator: abort it.
    #[error("the transaction must be aborted: {0}")]
    TransactionAbortable(Box<Error>),
}

impl Error {
    /// The server's error code, if this is a server error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when the request certainly had no effect and may be retried safely (even without
    /// idempotence): the leader refused it before appending.
    pub fn is_retriable_without_effect(&self) -> bool {
        matches!(
            self.code(),
            Some(ErrorCode::NotLeaderOrFollower | ErrorCode::LeaderNotAvailable | ErrorCode::NotEnoughReplicas)
        )
    }
}

impl Error {
    /// True when resending the *same idempotent batch* (same producer id, epoch and sequence)
    /// is safe and may succeed: the partition deduplicates it if the first attempt was stored.
    pub fn is_retriable_idempotent(&self) -> bool {
        match self {
            Error::Transport(_) => true,
            Error::InvalidArgument(_) | Error::TimedOut(_) | Error::TransactionAbortable(_) => false,
            Error::Server { code, .. } => matches!(
                code,
                ErrorCode::NotLeaderOrFollower
                    | ErrorCode::LeaderNotAvailable
                    | ErrorCode::NotEnoughReplicas
                    | ErrorCode::NotEnoughReplicasAfterAppend
                    | ErrorCode::RequestTimedOut
                    | ErrorCode::NodeShuttingDown
                    | ErrorCode::StorageError
                    | ErrorCode::TooManyProducers
                    | ErrorCode::UnknownServerError
                    // A transactional batch: the coordinator is busy or moving; nothing appended.
                    | ErrorCode::ConcurrentTransactions
                    | ErrorCode::CoordinatorNotAvailable
                    | ErrorCode::NotCoordinator
                    | ErrorCode::CoordinatorLoadInProgress
            ),
        }
    }
}

/// How a transactional producer must treat an error (Kafka's classification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionErrorKind {
    /// Retrying the same call may succeed; the transaction is intact.
    Retriable,
    /// The transaction cannot commit: abort it, then begin a new one.
    Abortable,
    /// This producer instance is done (fenced by a newer one, or misused): close it; a new
    /// instance calls `init_transactions`.
    Fatal,
}

impl Error {
    /// How a transactional producer must treat this error.
    pub fn transaction_kind(&self) -> TransactionErrorKind {
        if let Error::TransactionAbortable(cause) = self {
            return match cause.transaction_kind() {
                TransactionErrorKind::Fatal => TransactionErrorKind::Fatal,
                _ => TransactionErrorKind::Abortable,
            };
        }
        match self.code() {
            Some(
                ErrorCode::ProducerFenced
                | ErrorCode::InvalidProducerEpoch
                | ErrorCode::InvalidProducerIdMapping
                | ErrorCode::TransactionCoordinatorFenced,
            ) => TransactionErrorKind::Fatal,
            Some(
                ErrorCode::ConcurrentTransactions
                | ErrorCode::CoordinatorNotAvailable
                | ErrorCode::NotCoordinator
                | ErrorCode::CoordinatorLoadInProgress
                // A transaction's offset commit still pending: it ends by itself.
                | ErrorCode::UnstableOffsetCommit
                // An `EndTxn` whose outcome is unknown: asking again is answered as a retry.
                | ErrorCode::RequestTimedOut,
            ) => TransactionErrorKind::Retriable,
            _ if matches!(self, Error::Transport(_)) => TransactionErrorKind::Retriable,
            _ if matches!(self, Error::InvalidArgument(_)) => TransactionErrorKind::Fatal,
            _ => TransactionErrorKind::Abortable,
        }
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn server(code: i32, message: String) -> Error {
    let code = ErrorCode::try_from(code).unwrap_or(ErrorCode::UnknownServerError);
    Error::Server { code, message }
}

pub(crate) fn status(s: tonic::Status) -> Error {
    Error::Transport(format!("{}: {}", s.code(), s.message()))
}

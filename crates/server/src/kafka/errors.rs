//! The Kafka listener's one mapping from the service layer's outcomes to Kafka's error codes.
//!
//! Per-entry refusals carry Rill's codes, which keep Kafka's numbers where the meaning is the
//! same; `crate::errors::kafka_code` gives the Kafka code for each of Rill's own. A request
//! refused as a whole has no place for a code in most of Kafka's answers: each handler puts
//! [`request_error`]'s code where its answer has one (each named entry, or the top level).

use rill_proto::common::ErrorCode;

use crate::errors::{kafka_code, Refusal};
use crate::service::RequestError;

/// Kafka's code for a refused entry.
pub fn code(refusal: &Refusal) -> i16 {
    kafka_code(refusal.code)
}

/// A request refused as a whole, as the refusal each of its entries carries.
pub fn request_refusal(e: &RequestError) -> Refusal {
    match e {
        RequestError::Invalid(_) | RequestError::TooManyEntries { .. } => {
            Refusal::new(ErrorCode::InvalidRequest, e.to_string())
        }
        RequestError::Denied(denied) => denied.refusal(),
        // The node knows no current leaders: the client asks another one.
        RequestError::StorageFailed { .. } => Refusal::new(ErrorCode::StorageError, e.to_string()),
    }
}

/// Kafka's code for a request refused as a whole.
pub fn request_error(e: &RequestError) -> i16 {
    code(&request_refusal(e))
}

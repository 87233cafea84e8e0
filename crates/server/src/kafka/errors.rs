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

/// Kafka's code for a refused `Produce` partition. A transactional producer fenced by a newer
/// one is `INVALID_PRODUCER_EPOCH` (47) here, as Kafka's brokers answer produce requests
/// (KIP-588 keeps `PRODUCER_FENCED`, 90, for the coordinator's requests): librdkafka raises its
/// fatal "fenced" error for 47 on a produce, and treats 90 there as an abortable failure.
pub fn produce_code(refusal: &Refusal) -> i16 {
    match refusal.code {
        ErrorCode::ProducerFenced => kafka_code(ErrorCode::InvalidProducerEpoch),
        _ => code(refusal),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_producer_is_told_so_as_kafka_tells_it_on_each_path() {
        let fenced = Refusal::new(ErrorCode::ProducerFenced, "a newer producer holds the id");
        assert_eq!(produce_code(&fenced), 47, "INVALID_PRODUCER_EPOCH on the produce path");
        assert_eq!(code(&fenced), 90, "PRODUCER_FENCED from the coordinator");
        let other = Refusal::new(ErrorCode::NotLeaderOrFollower, "moved");
        assert_eq!(produce_code(&other), code(&other));
    }
}

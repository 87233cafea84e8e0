//! Conversions between Kafka's wire values and the service layer's, shared by every handler:
//! the one place that decides what a negative count or index from the wire becomes.

use kafka_protocol::protocol::StrBytes;

/// A partition index from the wire: a negative one names no partition, and is looked up as one
/// that cannot exist, so the service answers it `UNKNOWN_TOPIC_OR_PARTITION` in its place.
pub fn partition_index(index: i32) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

/// A non-negative count of milliseconds or bytes from the wire; a negative one is 0 (which the
/// service refuses wherever 0 is not a valid value, a timeout for one).
pub fn non_negative(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// An offset as Kafka's signed 64-bit one.
pub fn offset(o: u64) -> i64 {
    i64::try_from(o).unwrap_or(i64::MAX)
}

/// A leader epoch from the wire: -1 (or any negative) is unknown.
pub fn known_epoch(epoch: i32) -> Option<i32> {
    (epoch >= 0).then_some(epoch)
}

/// A string from the wire as the service layer takes it.
pub fn text(s: &StrBytes) -> String {
    s.to_string()
}

/// A string for the wire.
pub fn str_bytes(s: String) -> StrBytes {
    StrBytes::from_string(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_wire_values_name_nothing() {
        assert_eq!(partition_index(-1), u32::MAX);
        assert_eq!(partition_index(7), 7);
        assert_eq!(non_negative(-5), 0);
        assert_eq!(non_negative(30_000), 30_000);
        assert_eq!(offset(u64::MAX), i64::MAX);
        assert_eq!((known_epoch(-1), known_epoch(0), known_epoch(7)), (None, Some(0), Some(7)));
    }
}

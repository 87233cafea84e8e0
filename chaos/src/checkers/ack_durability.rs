//! Acknowledged means durable (white-box): when a client receives an acknowledgement, the
//! record's entry is already in the *synced* state of enough replicas — a majority for
//! `acks=all`, the leader for `acks=1`. Checked against what a power failure would leave.
//!
//! acks=all is checked when the acknowledgement *arrives* at the client: a committed entry only
//! gains copies after it was acknowledged, so that is as strict as checking at the server. acks=1
//! is checked at the leader at the moment it answers (a probe in node code): later a new leader
//! may legitimately truncate the entry.

use super::Violation;

/// The durable copies counted when an acknowledgement arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckCheck {
    /// Partition.
    pub partition: u32,
    /// Acknowledged offset.
    pub offset: u64,
    /// Replicas whose synced log held the entry at that moment.
    pub durable_copies: usize,
    /// Copies the acknowledgement level promises.
    pub required: usize,
}

/// Checks every recorded acknowledgement.
pub fn check(acks: &[AckCheck]) -> Vec<Violation> {
    acks.iter()
        .filter(|a| a.durable_copies < a.required)
        .map(|a| Violation {
            checker: "ack-durability",
            detail: format!(
                "{}/{} was acknowledged with {} synced cop{} (needs {})",
                a.partition,
                a.offset,
                a.durable_copies,
                if a.durable_copies == 1 { "y" } else { "ies" },
                a.required
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_few_synced_copies_are_caught() {
        let a = AckCheck { partition: 0, offset: 4, durable_copies: 1, required: 2 };
        let b = AckCheck { partition: 0, offset: 5, durable_copies: 2, required: 2 };
        let v = check(&[a, b]);
        assert_eq!(v.len(), 1);
        assert!(v[0].detail.contains("0/4"));
    }
}

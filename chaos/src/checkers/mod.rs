//! History checkers, one invariant per file. Each returns the violations it finds; an empty list
//! means the history is consistent with the guarantee.
//!
//! Client-visible (from the [`History`]): [`lost_write`], [`inconsistent_offsets`],
//! [`duplicates`], [`refused_stored`], [`poll_order`], [`send_order`], [`deleted_records`], [`compaction_kept`]
//! (with the final cleaning point, white-box, as its oracle), [`group_delivery`] (what consumer
//! group members handed out), [`txn_visibility`] (what read_committed readers returned of
//! committed, aborted and undecided transactions), [`exactly_once`] (a consume-transform-produce
//! job's output against its input), [`share_delivery`] (what share group members were handed and
//! how their acknowledgements were answered).
//! White-box (from replica state only the simulator can see): [`replicas_agree`],
//! [`watermarks`], [`ack_durability`], [`deleted_records::check_replicas`],
//! [`group_ownership`] (consumer groups' coordinator state).

pub mod ack_durability;
pub mod compaction_kept;
pub mod deleted_records;
pub mod duplicates;
pub mod exactly_once;
pub mod group_delivery;
pub mod group_ownership;
pub mod inconsistent_offsets;
pub mod lost_write;
pub mod poll_order;
pub mod refused_stored;
pub mod replicas_agree;
pub mod send_order;
pub mod share_delivery;
pub mod txn_visibility;
pub mod watermarks;

use crate::history::History;

/// One broken guarantee, with enough detail to start debugging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The checker that found it.
    pub checker: &'static str,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.checker, self.detail)
    }
}

/// Runs every client-visible checker that applies to `history`.
pub fn check_history(history: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    if history.acks_promise_offsets {
        out.extend(lost_write::check(history));
        out.extend(send_order::check(history));
    }
    out.extend(compaction_kept::check(history));
    out.extend(inconsistent_offsets::check(history));
    out.extend(duplicates::check(history));
    out.extend(refused_stored::check(history));
    out.extend(poll_order::check(history));
    out.extend(deleted_records::check(history));
    out
}

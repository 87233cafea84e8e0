//! One writing heartbeat decision at a time per group on its coordinator.
//!
//! A decision that changes its group proposes a compare-and-set on the group's version. Held
//! heartbeats of one group woken by the same change would all decide from one version, and all
//! but one would lose and decide again: conflicts growing with the square of the members woken.
//! Taking the group's turn before writing makes them write one after another, each from what
//! the one before left. Decisions that only read take no turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rill_rt::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// Entries kept before the first sweep of turns nobody holds or waits for.
const SWEEP_FIRST_AT: usize = 1024;

/// The turns of the groups a coordinator decides for.
#[derive(Debug, Default)]
pub struct GroupTurns {
    inner: Mutex<Turns>,
}

#[derive(Debug, Default)]
struct Turns {
    by_group: HashMap<String, Arc<AsyncMutex<()>>>,
    /// The size at which unused turns are swept next: twice what the last sweep kept, so a
    /// sweep costs O(1) per turn taken.
    sweep_at: usize,
}

impl GroupTurns {
    /// No turns yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits for `group_id`'s turn; it passes on when the guard is dropped.
    pub async fn take(&self, group_id: &str) -> OwnedMutexGuard<()> {
        let turn = {
            let mut t = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if t.by_group.len() >= t.sweep_at.max(SWEEP_FIRST_AT) {
                t.by_group.retain(|_, turn| Arc::strong_count(turn) > 1);
                t.sweep_at = 2 * t.by_group.len();
            }
            t.by_group.entry(group_id.to_string()).or_default().clone()
        };
        turn.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_decision_at_a_time_per_group_and_unused_turns_are_swept() {
        let turns = GroupTurns::new();
        let a = turns.take("a").await;
        assert!(rill_rt::timeout(std::time::Duration::from_millis(20), turns.take("a")).await.is_err(), "a is taken");
        let b = turns.take("b").await;
        drop((a, b));
        drop(turns.take("a").await);
        for i in 0..2 * SWEEP_FIRST_AT {
            drop(turns.take(&format!("g{i}")).await);
        }
        let kept = turns.inner.lock().unwrap().by_group.len();
        assert!(kept < 2 * SWEEP_FIRST_AT, "unused turns swept, {kept} kept");
    }
}
